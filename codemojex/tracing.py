"""One trace per guess, with OpenTelemetry: off by default, and free when off.

A guess crosses two processes and the queue between them::

    web     POST /api/guesses (server) ─ echomq.enqueue (producer) ──┐ traceparent in the
                                                                      │ job's headers
    worker  queue.wait (enqueued -> claimed, server clock) ◄──────────┤
            echomq.claim (consumer) ─┬─ score                         │
                                     ├─ sql.commit (its group commit) │
                                     └─ echomq.complete               │ traceparent in the
    web     ws.push (the hub offers the score to the player's sockets)◄ completion's result

The context travels in EchoMQ's job headers (``Lanes.submit(headers=...)`` ->
``Claim.headers``), never in the payload; back to the web process it rides on the
completion's result (``traceparent``), which the hub reads from the events stream and
never forwards to a socket.

Switch (decided once per process, at the first :func:`configure` or :func:`enabled`):
on when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``), or, with it
unset, when an OTLP endpoint is given (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` keep it off. The SDK is imported only then (the ``otel``
extra); asked for without it, a warning and tracing stays off. Everything else is the
SDK's own ``OTEL_*`` handling: service name, endpoint, headers, batch delays.

Off, every hook below is one cached boolean test (or a shared no-op context manager):
no header is attached to a job, so EchoMQ writes no field and reads an empty one.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanContext, Tracer

    import echomq
    import echomq.hooks

log = logging.getLogger("codemojex.tracing")

DEFAULT_SERVICE = "codemojex"
TRACEPARENT = "traceparent"
# Completions not yet sent: (job_id, token) -> the consumer span they belong to. Bounded,
# in case a completion is never sent (the consumer stopped, the lease went elsewhere).
_MAX_WAITING = 10_000

_decided = False
_on = False
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_finished: dict[tuple[str, int], SpanContext] = {}

Handler = Callable[["echomq.Claim"], Awaitable[Any]]


# -- the switch -------------------------------------------------------------------------------


def requested(env: Mapping[str, str] = os.environ) -> list[str]:
    """The trace exporters the environment asks for ([] = tracing off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n]
    if names:
        return [] if "none" in names else names
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return ["otlp"] if endpoint else []


def configure(service: str = DEFAULT_SERVICE) -> bool:
    """Decide once for this process whether to trace, from the ``OTEL_*`` variables;
    ``service`` is the service name unless ``OTEL_SERVICE_NAME`` (or
    ``OTEL_RESOURCE_ATTRIBUTES``) gives one. Later calls return the first decision."""
    global _decided
    if _decided:
        return _on
    _decided = True
    exporters = requested()
    if not exporters:
        return False
    try:
        provider = _build_provider(service, exporters)
    except ImportError as e:
        log.warning(
            "tracing asked for (OTEL_*) but OpenTelemetry is not installed (%s);"
            " install codemojex[otel]. Tracing stays off.",
            e,
        )
        return False
    except ValueError as e:
        log.warning("tracing: %s. Tracing stays off.", e)
        return False
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    use(provider)
    log.info("tracing on: %s, exporters %s", service, ",".join(exporters))
    return True


def enabled() -> bool:
    """Whether this process traces (decided at the first call, then a cached boolean)."""
    return _on if _decided else configure()


def use(provider: TracerProvider | None) -> None:
    """Trace with ``provider`` from now on (tests: an in-memory exporter), or stop
    tracing with None."""
    global _decided, _on, _tracer, _provider
    _decided, _on, _provider = True, provider is not None, provider
    _tracer = provider.get_tracer("codemojex") if provider is not None else None
    _finished.clear()


def _build_provider(service: str, exporters: list[str]) -> TracerProvider:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
    )

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    provider = TracerProvider(resource=resource)  # flushed at exit (shutdown_on_exit)
    for name in exporters:
        exporter: SpanExporter
        if name == "otlp":
            protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
                "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
            )
            if protocol != "http/protobuf":
                raise ValueError(f"OTLP protocol {protocol!r}: only http/protobuf is supported")
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            exporter = ConsoleSpanExporter(service_name=service)
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER={name!r}: codemojex knows otlp and console")
    return provider


def _t() -> Tracer:
    assert _tracer is not None
    return _tracer


# -- web: the request and the enqueue ---------------------------------------------------------


@contextlib.contextmanager
def server_span(method: str, route: str, headers: Mapping[str, str]) -> Iterator[Span]:
    """The web request's span (kind server), child of the caller's ``traceparent`` if the
    request carries one. Call only when :func:`enabled`."""
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    parent = propagate.extract(headers) if TRACEPARENT in headers else None
    with _t().start_as_current_span(
        f"{method} {route}",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={"http.request.method": method, "http.route": route},
    ) as span:
        yield span


class Enqueueing:
    """What :func:`enqueueing` yields: ``headers`` to give the enqueue (None when off) and
    :meth:`enqueued` to name the job once it has an id."""

    __slots__ = ("headers", "span")

    def __init__(self, span: Span | None, headers: dict[str, str] | None) -> None:
        self.span = span
        self.headers = headers

    def enqueued(self, job_id: str, created: bool) -> None:
        if self.span is not None:
            self.span.set_attribute("job_id", job_id)
            self.span.set_attribute("echomq.created", created)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NOT_TRACED = Enqueueing(None, None)


@contextlib.contextmanager
def _enqueue_span(lane: str, player_id: str, round_id: str) -> Iterator[Enqueueing]:
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    with _t().start_as_current_span(
        "echomq.enqueue",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "echomq",
            "messaging.operation.type": "send",
            "lane": lane,
            "player_id": player_id,
            "round_id": round_id,
        },
    ) as span:
        headers: dict[str, str] = {}
        propagate.inject(headers)  # the producer span's context: the worker's parent
        yield Enqueueing(span, headers)


def enqueueing(
    lane: str, player_id: str, round_id: str
) -> contextlib.AbstractContextManager[Enqueueing]:
    """Around a guess's enqueue: a producer span whose context the job carries in its
    headers. Off: a shared no-op whose ``headers`` is None (no field is stored)."""
    if not enabled():
        return _NOT_TRACED
    return _enqueue_span(lane, player_id, round_id)


# -- worker: claim, score, commit, complete ---------------------------------------------------


def traced(handler: Handler, *, worker_id: str, lease_ms: int) -> Handler:
    """``handler`` with a consumer span per claim, child of the context the job carries,
    after a ``queue.wait`` span from its enqueue to its claim (both on the server clock:
    the claim time is its lease deadline less ``lease_ms``). A dict result gains the span's
    ``traceparent``, which the completion event takes to the web process. Off: ``handler``
    itself."""
    if not enabled():
        return handler

    async def handle(claim: echomq.Claim) -> Any:
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind

        parent = propagate.extract(claim.headers) if claim.headers else None
        p = claim.payload if isinstance(claim.payload, dict) else {}
        attrs: dict[str, Any] = {
            "messaging.system": "echomq",
            "job_id": claim.job_id,
            "lane": claim.lane or "",
            "attempts": claim.token,
            "worker_id": worker_id,
            # a guess on its player's own lane leaves the player out of its payload
            "player_id": str(p.get("player_id") or claim.lane or ""),
            "round_id": str(p.get("round_id", "")),
        }
        claimed_ms = claim.lease_until_ms - lease_ms
        if claim.enqueued_at_ms and claimed_ms >= claim.enqueued_at_ms:
            attrs["queue.wait_ms"] = claimed_ms - claim.enqueued_at_ms
            _t().start_span(
                "queue.wait",
                context=parent,
                attributes=attrs,
                start_time=claim.enqueued_at_ms * 1_000_000,
            ).end(end_time=claimed_ms * 1_000_000)
        with _t().start_as_current_span(
            "echomq.claim",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={**attrs, "messaging.operation.type": "process", "stalls": claim.stalls},
        ) as span:
            result = await handler(claim)
            ctx = span.get_span_context()
            if len(_finished) >= _MAX_WAITING:
                _finished.pop(next(iter(_finished)))
            _finished[(claim.job_id, claim.token)] = ctx
            if isinstance(result, dict):
                carrier: dict[str, str] = {}
                propagate.inject(carrier)
                result = {**result, TRACEPARENT: carrier.get(TRACEPARENT, "")}
            return result

    return handle


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[Any]:
    """A child span of the current one (``score``, ``sql.commit``); off: a shared no-op."""
    if not _on:
        return _NOTHING
    return _t().start_as_current_span(name, attributes=attributes)


_NOTHING = contextlib.nullcontext()


def trace_completions(queue: echomq.Queue) -> None:
    """Give each completion of a traced claim an ``echomq.complete`` span, child of its
    consumer span. The consumer completes in pipelined batches after the handler
    returned, so this adds an ``around_complete`` hook to ``queue`` (every consumer of
    that queue object started from now on uses it; EchoMQ itself knows nothing of
    tracing). Off: no hook is added."""
    if not enabled():
        return
    import echomq

    queue.add_hooks(echomq.Hooks(around_complete=_complete_spans))


async def _complete_spans(
    items: Sequence[echomq.hooks.Completion], send: echomq.hooks.Send
) -> list[bool]:
    """The ``around_complete`` hook: a client span per traced completion in the batch,
    ended with the verdict (``echomq.completed``: False = stale, not counted)."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanKind, Status, StatusCode

    spans = []
    for job_id, token, _ in items:
        ctx = _finished.get((job_id, token))
        if ctx is not None:
            spans.append(
                (
                    (job_id, token),
                    _t().start_span(
                        "echomq.complete",
                        context=trace.set_span_in_context(NonRecordingSpan(ctx)),
                        kind=SpanKind.CLIENT,
                        attributes={
                            "job_id": job_id,
                            "attempts": token,
                            "echomq.batch": len(items),
                        },
                    ),
                )
            )
    try:
        verdicts = await send(items)
    except BaseException as e:
        for _, s in spans:  # the consumer sends them again: new spans then
            s.record_exception(e)
            s.set_status(Status(StatusCode.ERROR, type(e).__name__))
            s.end()
        raise
    done = {(j, t): v for (j, t, _), v in zip(items, verdicts, strict=True)}
    for key, s in spans:
        s.set_attribute("echomq.completed", done[key])  # False: stale, not counted
        s.end()
        _finished.pop(key, None)
    return verdicts


# -- web: the push ----------------------------------------------------------------------------


def record_push(
    result: Mapping[str, Any],
    *,
    job_id: str,
    started_ns: int,
    sockets: int,
) -> None:
    """The hub offered a score to ``sockets`` sockets: a ``ws.push`` span from
    ``started_ns``, child of the worker's consumer span (the result's ``traceparent``).
    A result without one (tracing off in the worker) records nothing."""
    traceparent = result.get(TRACEPARENT)
    if not _on or not isinstance(traceparent, str) or not traceparent:
        return
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    parent: Context = propagate.extract({TRACEPARENT: traceparent})
    _t().start_span(
        "ws.push",
        context=parent,
        kind=SpanKind.PRODUCER,
        start_time=started_ns,
        attributes={
            "job_id": job_id,
            "player_id": str(result.get("player_id", "")),
            "round_id": str(result.get("round_id", "")),
            "worker_id": str(result.get("worker_id", "")),
            "ws.sockets": sockets,
        },
    ).end()
