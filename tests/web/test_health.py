"""Liveness and readiness: ``/livez`` says the process serves, ``/readyz`` that it should get
traffic (Valkey and SQL answer, as ``/healthz``)."""

from __future__ import annotations

from tests.web.conftest import Served, assert_error, serve


async def test_live_and_ready(served: Served) -> None:
    assert (await served.http.get("/livez")).json() == {"status": "ok"}
    ready = await served.http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["valkey"] and ready.json()["sql"]


async def test_alive_but_not_ready_without_valkey(served: Served) -> None:
    async with serve(served.config.with_(valkey_url="redis://127.0.0.1:1/0")) as cut_off:
        assert (await cut_off.http.get("/livez")).status_code == 200
        body = assert_error(await cut_off.http.get("/readyz"), 503, "unavailable")
        assert body["valkey"] is False and body["sql"] is True
