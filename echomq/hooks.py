"""Hooks: how a program extends its consumers and enqueues without touching EchoMQ's insides."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import checks
from .types import Claim, FailOutcome

log = logging.getLogger("echomq.hooks")

Handler = Callable[[Claim], Awaitable[Any]]
Completion = tuple[str, int, bytes]
"""One completion as the consumer sends it: ``(job_id, token, encoded result)``."""
Send = Callable[[Sequence[Completion]], Awaitable[list[bool]]]
"""Sends a completion batch; one verdict per item (True: counted, False: stale)."""

Notified = Awaitable[None] | None
AroundHandler = Callable[[Claim, Handler], Awaitable[Any]]
AroundComplete = Callable[[Sequence[Completion], Send], Awaitable[list[bool]]]
OnClaim = Callable[[Sequence[Claim]], Notified]
OnFail = Callable[[Claim, BaseException, FailOutcome], Notified]
OnRelease = Callable[[Claim, bool], Notified]
AfterExtend = Callable[[Sequence[Claim], Sequence[bool]], Notified]
OnEnqueue = Callable[[Mapping[str, str]], Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class Hooks:
    """Optional callables at the points of a job's life (what a raising one does: above).

    Attributes:
        around_handler: ``async (claim, call_next) -> result``. Runs in place of the
            handler; ``await call_next(claim)`` runs the next hook inward, and innermost
            the handler. Its return value is completed; its exception fails the job.
        on_claim: ``(claims) -> None``, once per claim call that leased jobs, with every
            job it leased, before any of them starts (or is handed back).
        around_complete: ``async (completions, send) -> verdicts``. Around each batch of
            completions the consumer pipelines: call ``await send(completions)`` once and
            return its verdicts. A batch that errs is sent again (seen twice).
        on_fail: ``(claim, error, outcome) -> None`` once a fail call answered: the
            handler's exception (or the consumer's ``TimedOut``, ``HandlerCancelled``,
            ``ResultNotEncodable``) and ``"scheduled"``, ``"dead"`` or ``"stale"``.
        on_release: ``(claim, released) -> None`` once a release call answered;
            ``released`` False: it was stale.
        after_extend: ``(claims, verdicts) -> None`` once a lease renewal answered, before
            the consumer cancels the handlers whose verdict is False (the lease is lost).
        on_enqueue: ``(headers) -> headers``, synchronous, at each enqueue through the
            queue: the headers to store instead (say, with a ``traceparent`` added).
    """

    around_handler: AroundHandler | None = None
    on_claim: OnClaim | None = None
    around_complete: AroundComplete | None = None
    on_fail: OnFail | None = None
    on_release: OnRelease | None = None
    after_extend: AfterExtend | None = None
    on_enqueue: OnEnqueue | None = None


def checked(hooks: Iterable[Hooks] | None) -> tuple[Hooks, ...]:
    """``hooks`` as a tuple, each a :class:`Hooks` (``TypeError`` otherwise)."""
    if hooks is None:
        return ()
    if isinstance(hooks, Hooks):
        return (hooks,)
    out = tuple(hooks)
    for h in out:
        if not isinstance(h, Hooks):
            raise TypeError(f"hooks must be echomq.Hooks, got {type(h).__name__}")
    return out


class _Noted:
    """Hook errors already logged at warning level: (point, kind)."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    def error(self, point: str, exc: BaseException) -> None:
        kind = (point, type(exc).__name__)
        if kind in self.seen:
            log.debug("hook %s failed again (%s: %s)", point, type(exc).__name__, exc)
            return
        self.seen.add(kind)
        log.warning(
            "hook %s raised %s: %s; passed over (logged once per kind)",
            point,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )


_NOTED = _Noted()


def enqueue_headers(
    hooks: Sequence[Hooks], headers: Mapping[str, str] | None
) -> Mapping[str, str] | None:
    """``headers`` after every ``on_enqueue`` of ``hooks`` (itself when none has one). The
    caller's are checked first; a hook's that fail the checks are passed over."""
    if not any(h.on_enqueue is not None for h in hooks):
        return headers
    out = checks.headers(headers) or {}
    for h in hooks:
        if h.on_enqueue is None:
            continue
        try:
            out = checks.headers(h.on_enqueue(dict(out))) or {}
        except Exception as e:  # noqa: BLE001 - a hook never refuses an enqueue
            _NOTED.error("on_enqueue", e)
    return out


class HookChain:
    """A consumer's hooks, the queue's then its own, as the calls it makes at each point."""

    __slots__ = (
        "_after_extend",
        "_around_complete",
        "_on_claim",
        "_on_fail",
        "_on_release",
        "handlers",
    )

    def __init__(self, hooks: Sequence[Hooks]) -> None:
        self.handlers = tuple(h.around_handler for h in hooks if h.around_handler is not None)
        self._on_claim = tuple(h.on_claim for h in hooks if h.on_claim is not None)
        self._around_complete = tuple(
            h.around_complete for h in hooks if h.around_complete is not None
        )
        self._on_fail = tuple(h.on_fail for h in hooks if h.on_fail is not None)
        self._on_release = tuple(h.on_release for h in hooks if h.on_release is not None)
        self._after_extend = tuple(h.after_extend for h in hooks if h.after_extend is not None)

    def wrap(self, handler: Handler) -> Handler:
        """``handler`` inside every ``around_handler``, the first outermost."""
        for around in reversed(self.handlers):
            handler = _layer(around, handler)
        return handler

    async def complete(self, items: Sequence[Completion], send: Send) -> list[bool]:
        """``send(items)`` inside every ``around_complete``, the first outermost."""
        for around in reversed(self._around_complete):
            send = _guarded(around, send)
        return await send(items)

    async def claimed(self, claims: Sequence[Claim]) -> None:
        for hook in self._on_claim:
            await _notify("on_claim", hook, claims)

    async def failed(self, claim: Claim, error: BaseException, outcome: FailOutcome) -> None:
        for hook in self._on_fail:
            await _notify("on_fail", hook, claim, error, outcome)

    async def released(self, claim: Claim, released: bool) -> None:
        for hook in self._on_release:
            await _notify("on_release", hook, claim, released)

    async def extended(self, claims: Sequence[Claim], verdicts: Sequence[bool]) -> None:
        for hook in self._after_extend:
            await _notify("after_extend", hook, claims, verdicts)


def _layer(around: AroundHandler, inner: Handler) -> Handler:
    async def handle(claim: Claim) -> Any:
        return await around(claim, inner)

    return handle


def _guarded(around: AroundComplete, send: Send) -> Send:
    """``around`` over ``send``, its own errors passed over: completions never depend on it."""

    async def guarded(items: Sequence[Completion]) -> list[bool]:
        sent: list[list[bool]] = []
        raised: list[BaseException] = []

        async def inner(batch: Sequence[Completion]) -> list[bool]:
            try:
                verdicts = await send(batch)
            except BaseException as e:
                raised.append(e)
                raise
            sent.append(verdicts)
            return verdicts

        try:
            verdicts = await around(items, inner)
            if not sent:  # answered without sending: the jobs would sit out their leases
                raise RuntimeError("around_complete returned without calling send")
            if not isinstance(verdicts, list) or len(verdicts) != len(items):
                raise TypeError("around_complete must return send()'s verdicts")
        except Exception as e:
            if raised and e is raised[-1]:
                raise  # the send's own error: the consumer retries the batch
            _NOTED.error("around_complete", e)
            if sent:
                return sent[-1]
            if raised:  # the hook swallowed the send's error and raised its own
                raise raised[-1] from None
            return await send(items)
        return verdicts

    return guarded


async def _notify(point: str, hook: Callable[..., Notified], *args: Any) -> None:
    try:
        r = hook(*args)
        if inspect.isawaitable(r):
            await r
    except Exception as e:  # noqa: BLE001 - a notification never changes a job's fate
        _NOTED.error(point, e)
