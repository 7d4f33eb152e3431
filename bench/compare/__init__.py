"""EchoMQ beside the other Python queues on Redis/Valkey. Prints figures; it is not a test.

    uv run python -m bench.compare [--jobs 20000] [--peers a,b,...] [--rounds 3]
                                   [--html OUT] [--json OUT]

One embedded Valkey (``echomq.server.EmbeddedValkey``) for every peer, ``FLUSHALL`` between
peers; the rounds are interleaved (the peer order rotated by one each round) so that drift on
a shared machine hits every peer alike, and each figure is the median over the rounds.

Each peer runs in a venv of its own (``~/.cache/codemojex/bench-venvs/<peer>-<version>``, made once with
``uv venv`` + ``uv pip install`` of the versions pinned in ``pins.py``), through a driver
(``peers/<peer>.py``) run as a subprocess in that venv, speaking a small JSON protocol on
stdio (``peers/_protocol.py``), so a peer's redis-py pin never meets ours. EchoMQ runs through
the same protocol from this project's venv: ``echomq-lanes`` (100 lanes),
``echomq-lanes-prefetch`` (the same, holding ``--concurrency`` more jobs ready, as many as
Dramatiq's worker holds by default: its queue prefetch is twice its threads) and
``echomq-plain``. Every job is a no-op; each worker runs the peer's own worker with
``--concurrency`` jobs in flight (what each peer calls that: see its driver).

Per peer and round, the same driver shape:

- enqueue single / 10 concurrent: N/2 jobs enqueued one call at a time, then N/2 with ten
  callers at once (asyncio tasks, or threads for the synchronous peers), from a producer
  process; jobs/s of each half.
- drain steady: then one worker process is started, and once it is ready told to go; it
  records each job's completion time (CLOCK_MONOTONIC). Steady = the middle 80 % of the jobs
  over the time between the 10th and 90th percentile completions, which leaves out the
  ramp-up (the worker's first claims and connections) and the tail. ``drain whole`` is N over
  "go" to the last completion.
- e2e p50 / p99: the same, warm worker, then ``--e2e-jobs`` jobs enqueued open-loop at
  ``--rate`` jobs/s, each carrying the monotonic time taken just before its enqueue call; the
  worker's handler subtracts it from its own monotonic clock (one clock for the machine).
- Valkey commands per job: ``INFO commandstats`` deltas (every ``cmdstat_*`` call count,
  which counts the commands scripts run inside under their own names, plus the
  EVALSHA/EVAL/FCALL itself), over the enqueue of the N jobs and over their drain apart,
  divided by N; the benchmark's own INFO calls are left out, the worker's start-up (before
  "go") too.
- worker CPU per job: the worker process's own CPU time (user + system, every thread, from
  ``time.process_time()`` inside it) from just before "go" to its N-th job, divided by N;
  beside it Valkey's CPU over the drain (``INFO cpu``, user + system) divided by N.

Then EchoMQ lanes alone is drained by several worker processes at once (``--procs``), its
steady rate given as a share of Valkey's EVALSHA ceiling, measured first on the same server
as ``bench.bench_echomq`` measures it (a trivial ``return 1`` script pipelined by
``redis-benchmark -P 100 -c 8`` where Debian's redis-tools is installed, else by redis-py,
``--ceiling-calls`` of them). The targets read "lane drain >= 3.5x the fastest
peer from one worker process; >= 50 % of the EVALSHA ceiling from several processes".

The ratios are to the fastest peer (the non-EchoMQ one with the highest steady drain), figure
by figure. The machine's load average is recorded with every round: on a shared machine read
the ratios, measured in the same run, before the absolute figures.
"""
