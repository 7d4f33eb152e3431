"""The door of a web process: how many API requests it works on at once, who waits, who is
shed (docs/contract.md §4, Overload).

Without it every request a client sends is worked on at once: past ~100 in flight the
Valkey pool refuses them all alike, and below that the event loop serves a masher's hundreds
of requests and an honest player's one first come, first served. The door
(:class:`~web.door.middleware.Door`, ASGI middleware over ``/api/`` paths; pages, static
files, health and metrics pass only its per-address bound, and a socket's handshake takes
the same, :meth:`~web.door.gate.Gate.address_slot`) does what nginx's ``limit_conn``,
fq_codel and an adaptive concurrency limiter (Netflix's gradient, Envoy's adaptive
concurrency) do together:

* **The body first.** A request's body (at most ``MAX_BODY_BYTES``) is read before the
  request counts against anything, within :data:`BODY_TIMEOUT_S`; one that does not arrive
  in time is ``408 request_timeout`` and its connection is closed. A client that declares a
  body and never sends it holds its own connection, not a slot.
* **No simple cross-site writes.** A state-changing request whose ``Origin`` is foreign and
  whose body is not declared ``application/json`` is ``403 forbidden`` before anything
  runs: a hostile page's form or ``text/plain`` fetch (a CORS "simple request", sent
  without a preflight) cannot spend the visitor's address bucket.

* **A bound.** At most ``limit`` requests are worked on at once (``--door-in-flight``);
  the Valkey pool is sized above it (``codemojex.game.pool_size``) and waits rather than
  fails, so the pool is never the cliff. The bound adapts (:class:`~web.door.gradient.Gradient`): when a
  guess's time inside grows past :data:`TOLERANCE` times its unloaded time, it shrinks, to
  a duty cycle below one slot if need be, and grows back once times are normal again.
* **Players first, addresses second.** Each request is weighed at arrival. An
  authenticated player weighs its own recent request rate (an exponentially decaying count
  per bearer token, counted as each request arrives: waiting at the door adds nothing to
  it); a token the door has not seen lately starts at the light threshold, behind players
  known to send at an honest pace. A player within the light threshold with at most
  :data:`PLAYER_IN_FLIGHT` requests here is its own sender: neither its address's bound nor
  its address's share refuses it, whatever else its address sends (a school, an office, a
  carrier's CGNAT is one address). A request without a token this process has
  authenticated (none, or one it does not know) weighs its address's rate of such
  requests, whole, plus its address's rate of all requests over :data:`ADDRESS_SHARE`
  (:func:`codemojex.admission.address_key`: an IPv6 /64 is one address): an address
  sending many of them is heavy by its own rate, and only authenticated players' rates set
  the light threshold (:meth:`~web.door.gate.Gate.field`), so a flood of made-up tokens cannot make
  honest players heavy.
* **Light first.** A request of weight at most :data:`LIGHT_RATE` (an honest pace) takes a
  free slot up to twice the configured bound whatever the adaptive one; any other waits, and a
  free slot goes to the lightest waiting (fq_codel's new flows first), so a player at an
  honest pace is served next however many requests a masher has waiting.
* **Heaviest shed.** A request that has waited ``wait_s`` (``--door-wait-ms``, the
  queue-delay target, as in CoDel) is shed, a light one only after :data:`LIGHT_PATIENCE`
  times that, and so is a player not seen yet whose own rate is light (it waits behind the
  known light ones, late rather than refused); under sustained overload those are the
  heaviest senders', which are never the lightest waiting. When :data:`MAX_WAITING` wait,
  the heaviest is shed at once to make room (the newcomer itself if it is the heaviest).
  Shed: ``503 overloaded`` with ``Retry-After``.
* **An address's share under overload.** While the door is overloaded (the adaptive bound
  below the configured one, or requests waiting), an address's guesses from senders past
  the light threshold by their own rate (over HTTP or the socket) are admitted at most at
  :data:`HEAVY_FLOOR` a second plus :data:`HEAVY_SHARE` of its light ones; past that they
  are shed at once. A player within the threshold is never charged to it. Reads are not
  charged: an accepted guess is what costs the honest players even when each heavy request
  is admitted after theirs: every accepted guess is scored by the workers on the same cores.
* **Per address.** One client address has at most ``address_limit`` requests at the door,
  working or waiting (``--address-in-flight``), whatever their path, socket handshakes
  included, of which senders past the light threshold hold at most
  :data:`FAST_ADDRESS_SHARE`; more are refused ``503 overloaded`` (a handshake: closed 1013
  after accept). A player's own requests (above) are outside it.
* **Refusals that cost little.** A guess from a player the bucket mirror already refuses
  (:class:`codemojex.admission.BucketMirror`) goes around the queue: it is answered
  ``429`` without a Valkey round trip, so it needs no slot. No ``503 overloaded`` leaves
  sooner than :data:`MIN_REFUSAL_S` (``Retry-After``) after its request arrived: a client
  that retries without waiting gains nothing by it and holds its connection that long per
  try instead of looping at the server's speed; a held refusal is a timer, not work. A
  sender (its token, else its address) that comes back before the ``Retry-After`` of its
  last refusal has passed has its next refusal held twice as long, up to
  :data:`MAX_REFUSAL_S`: the closed loops of a client that never waits then cost the
  process a fraction of the requests they would make (:meth:`~web.door.gate.Gate.refusal_hold`).

Its parts: :mod:`web.door.rates` (a sender's decaying rate), :mod:`web.door.gradient` (the
adaptive bound), :mod:`web.door.gate` (the state: slots, queue, weights, refusals),
:mod:`web.door.admit` (:func:`~web.door.admit.through`, the one way in for HTTP and the
socket alike), :mod:`web.door.origin`, :mod:`web.door.body`, :mod:`web.door.middleware`
(the ASGI door) and :mod:`web.door.collector` (its ``/metrics``).
"""
