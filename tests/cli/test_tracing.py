"""One trace per guess across real processes: ``codemojex up`` (a web process, a worker
process) exports with the SDK's OTLP/HTTP exporter, switched on by nothing but
``OTEL_EXPORTER_OTLP_ENDPOINT``, to a real HTTP receiver in this test that decodes the
protobuf with opentelemetry-proto; the spans of one guess share one trace id and link
parent -> child from the web process to the worker and back."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson
import pytest
import redis
import websockets
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from echomq.keys import Keys
from harness.running import Up, wait_until

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Received:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint (``POST /v1/traces``, protobuf) keeping every span."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def snapshot(self) -> list[Received]:
        with self.lock:
            return list(self.spans)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got = []
        for rs in request.resource_spans:
            res = {a.key: a.value.string_value for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {a.key: _value(a.value) for a in s.attributes}
                    got.append(
                        Received(
                            res.get("service.name", ""),
                            s.name,
                            s.kind,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            attrs,
                        )
                    )
        with self.server.lock:
            self.server.spans.extend(got)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# OTLP span kinds (opentelemetry.proto.trace.v1.Span.SpanKind)
INTERNAL, SERVER, CLIENT, PRODUCER, CONSUMER = 1, 2, 3, 4, 5


def test_a_guess_is_one_trace_across_the_web_and_worker_processes(
    receiver: Receiver, start_up: Callable[..., Up], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)  # the only switch
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export within 0.1 s
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    up = start_up("--workers", "1")
    with httpx.Client(base_url=up.base, timeout=5, trust_env=False) as http:
        player = http.post("/api/players", json={"name": "tracer"}).json()
        round_ = http.get("/api/round").json()

    async def guess_and_get_scored() -> str:
        async with websockets.connect(
            f"ws://127.0.0.1:{up.port}/ws?token={player['token']}", open_timeout=5
        ) as ws:
            await ws.recv()  # greeted: the hub holds the socket before the score comes
            async with httpx.AsyncClient(base_url=up.base, timeout=5, trust_env=False) as h:
                r = await h.post(
                    "/api/guesses",
                    headers={"Authorization": f"Bearer {player['token']}"},
                    json={"round_id": round_["round_id"], "guess": round_["palette"][:4]},
                )
            assert r.status_code == 202, r.text
            job_id: str = r.json()["job_id"]
            async with asyncio.timeout(15):
                while True:
                    m = orjson.loads(await ws.recv())
                    if m["type"] == "score" and m["job_id"] == job_id:
                        assert "traceparent" not in m  # the trace context never reaches a socket
                        return job_id

    job_id = asyncio.run(guess_and_get_scored())
    want = {
        "POST /api/guesses",
        "echomq.enqueue",
        "queue.wait",
        "echomq.claim",
        "score",
        "sql.commit",
        "echomq.complete",
        "ws.push",
    }

    def of_the_guess() -> dict[str, Received]:
        spans = receiver.snapshot()
        ids = {s.trace_id for s in spans if s.attributes.get("job_id") == job_id}
        return {s.name: s for s in spans if s.trace_id in ids}

    wait_until(lambda: set(of_the_guess()) >= want, 15, f"the spans of {job_id}\n{up.logs()}")
    spans = of_the_guess()
    assert len({s.trace_id for s in spans.values()}) == 1  # one trace
    assert {s.service for n, s in spans.items() if n in want} == {
        "codemojex-web",
        "codemojex-worker",
    }
    web = {"POST /api/guesses", "echomq.enqueue", "ws.push"}
    for name in want:
        assert spans[name].service == ("codemojex-web" if name in web else "codemojex-worker")

    def parent_of(name: str) -> str:
        parent = spans[name].parent
        [p] = [n for n, s in spans.items() if s.span_id == parent]
        return p

    server = spans["POST /api/guesses"]
    assert server.parent == "" and server.kind == SERVER  # the root
    assert parent_of("echomq.enqueue") == "POST /api/guesses"
    assert parent_of("queue.wait") == "echomq.enqueue"  # across processes, in the job
    assert parent_of("echomq.claim") == "echomq.enqueue"
    assert parent_of("score") == "echomq.claim"
    assert parent_of("sql.commit") == "echomq.claim"
    assert parent_of("echomq.complete") == "echomq.claim"
    assert parent_of("ws.push") == "echomq.claim"  # and back, on the completion's result
    assert spans["echomq.enqueue"].kind == PRODUCER
    assert spans["echomq.claim"].kind == CONSUMER
    claim = spans["echomq.claim"].attributes
    assert claim["job_id"] == job_id and claim["player_id"] == player["player_id"]
    assert claim["round_id"] == round_["round_id"] and claim["attempts"] == 1
    assert claim["worker_id"] and claim["lane"] == player["player_id"]
    assert spans["queue.wait"].attributes["queue.wait_ms"] >= 0
    assert spans["ws.push"].attributes["ws.sockets"] == 1
    assert spans["echomq.complete"].attributes["echomq.completed"] is True


def test_with_tracing_off_a_guess_stores_no_header(
    start_up: Callable[..., Up], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in (
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ):
        monkeypatch.delenv(var, raising=False)
    up = start_up("--workers", "0")  # the job stays pending: its row is there to read
    with httpx.Client(base_url=up.base, timeout=5, trust_env=False) as http:
        player = http.post("/api/players", json={"name": "untraced"}).json()
        round_ = http.get("/api/round").json()
        r = http.post(
            "/api/guesses",
            headers={"Authorization": f"Bearer {player['token']}"},
            json={"round_id": round_["round_id"], "guess": round_["palette"][:4]},
        )
    assert r.status_code == 202, r.text
    conn = redis.Redis.from_url(up.valkey_url)
    try:
        row = conn.hgetall(Keys("guesses").job(r.json()["job_id"]))
    finally:
        conn.close()
    assert b"enq" in row and b"state" not in row  # the row is the guess's, pending
    assert b"headers" not in row
