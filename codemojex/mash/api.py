"""The game's public HTTP API as the load script uses it: one pooled ``httpx.AsyncClient``.

Submissions carry an ``Idempotency-Key`` and are retried with the same key when the answer
is lost (a transport error, a timeout, ``503``): the server then answers with the job it
already accepted, so the load script never loses track of an accepted guess and never makes
the server count one twice. Every call is bounded by the client's timeouts. A patient
client (an honest player) pauses before a retry, ``Retry-After`` after ``503 overloaded``;
an impatient one (a masher) retries at once, and after ``503 overloaded`` — the door's
refusal, which the guess never got past — moves on to its next guess.

``local_address`` binds every connection's source address (``127.0.0.x`` against a server
on loopback), so one process can be many clients to the server's per-address limits.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import uuid
from dataclasses import dataclass
from typing import Any, Literal

import httpx

REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
SUBMIT_ATTEMPTS = 5
RETRY_PAUSE_S = 0.25
OVERLOADED_ATTEMPTS = 10  # set-up, admin and verdict calls retried after 503 overloaded

Outcome = Literal[
    "accepted", "lane_full", "rate_limited", "round_closed", "overloaded", "refused", "unknown"
]


class ApiError(Exception):
    """An answer the load script cannot work with (setup failures, admin refusals)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:200]}")
        self.status = status


@dataclass(frozen=True, slots=True)
class Submitted:
    """What became of one submission."""

    outcome: Outcome
    job_id: str | None = None
    seq: int | None = None
    retry_after_s: float = 0.0
    detail: str = ""
    statuses: tuple[int, ...] = ()  # every answer's status, retries included


@dataclass(frozen=True, slots=True)
class NewPlayer:
    player_id: str
    name: str
    token: str


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle costs ~15 ms a time."""
    return ssl.create_default_context()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _retry_after(resp: httpx.Response) -> float:
    try:
        return max(0.0, float(resp.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def _code(resp: httpx.Response) -> str:
    try:
        return str(resp.json().get("error", ""))
    except (ValueError, AttributeError):
        return ""


class GameApi:
    def __init__(
        self, base_url: str, *, connections: int = 64, local_address: str | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.local_address = local_address
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        verify: ssl.SSLContext | bool = _tls() if base_url.startswith("https") else False
        transport = (
            httpx.AsyncHTTPTransport(verify=verify, limits=limits, local_address=local_address)
            if local_address
            else None
        )
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            limits=limits,
            timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            trust_env=False,  # a load test talks to the server it is given, not via a proxy
            verify=verify,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    @property
    def ws_url(self) -> str:
        return "ws" + self.base_url.removeprefix("http") + "/ws"

    async def _json(self, method: str, path: str, *, expect: int = 200, **kwargs: Any) -> Any:
        for _ in range(OVERLOADED_ATTEMPTS):
            resp = await self.http.request(method, path, **kwargs)
            # The door refused it before any work (a busy server): as a client should,
            # wait Retry-After and ask again; nothing was done, so asking twice is safe.
            if resp.status_code != 503 or _code(resp) != "overloaded":
                break
            await asyncio.sleep(_retry_after(resp))
        if resp.status_code != expect:
            raise ApiError(resp.status_code, resp.text)
        return resp.json()

    # -- players and rounds ---------------------------------------------------------------------

    async def create_player(self, name: str) -> NewPlayer:
        body = await self._json("POST", "/api/players", json={"name": name}, expect=201)
        return NewPlayer(body["player_id"], body["name"], body["token"])

    async def current_round(self) -> dict[str, Any]:
        return dict(await self._json("GET", "/api/round"))

    async def round(self, round_id: str) -> dict[str, Any]:
        return dict(await self._json("GET", f"/api/rounds/{round_id}"))

    # -- guesses --------------------------------------------------------------------------------

    async def submit(
        self, token: str, round_id: str, guess: list[str], *, patient: bool = True
    ) -> Submitted:
        """POST one guess; on a lost answer retry with the same key (bounded). ``patient``:
        pause before each retry (see the module docstring)."""
        headers = {**_bearer(token), "Idempotency-Key": uuid.uuid4().hex}
        body = {"round_id": round_id, "guess": guess}
        detail = ""
        statuses: list[int] = []
        pause = 0.0
        only_overloaded = True  # every answer so far was the door's: nothing was taken
        for attempt in range(SUBMIT_ATTEMPTS):
            if attempt and patient:
                await asyncio.sleep(max(pause, RETRY_PAUSE_S * attempt))
            try:
                resp = await self.http.post("/api/guesses", json=body, headers=headers)
            except httpx.TransportError as exc:  # the answer may be lost, not the guess
                detail = f"{type(exc).__name__}: {exc}"
                only_overloaded = False
                continue
            status = resp.status_code
            statuses.append(status)
            if status == 202:
                out = resp.json()
                return Submitted("accepted", out["job_id"], int(out["seq"]), statuses=(*statuses,))
            if status == 429:  # lane_full or rate_limited: both say when to return
                kind: Outcome = "rate_limited" if _code(resp) == "rate_limited" else "lane_full"
                return Submitted(kind, retry_after_s=_retry_after(resp), statuses=(*statuses,))
            if status == 409 and "round_closed" in resp.text:
                return Submitted("round_closed", statuses=(*statuses,))
            if status == 503:
                code = _code(resp) or "unavailable"
                detail = f"503 {code}"
                if code == "overloaded":
                    if not patient:
                        return Submitted("overloaded", detail=detail, statuses=(*statuses,))
                    pause = _retry_after(resp)
                else:
                    only_overloaded = False
                continue
            return Submitted("refused", detail=f"{status} {resp.text[:200]}", statuses=(*statuses,))
        if only_overloaded and statuses:  # refused at the door every time: not taken
            return Submitted("overloaded", detail=detail, statuses=(*statuses,))
        # Whether the server took it is unknown: counted apart, never as accepted.
        return Submitted("unknown", detail=detail, statuses=(*statuses,))

    async def guess(self, token: str, job_id: str) -> dict[str, Any] | None:
        for _ in range(OVERLOADED_ATTEMPTS):
            resp = await self.http.get(f"/api/guesses/{job_id}", headers=_bearer(token))
            if resp.status_code != 503 or _code(resp) != "overloaded":
                break
            await asyncio.sleep(_retry_after(resp))  # a busy door: come back, as told
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise ApiError(resp.status_code, resp.text)
        return dict(resp.json())

    async def leaderboard(self, round_id: str | None = None) -> list[dict[str, Any]]:
        params = {"round_id": round_id} if round_id else None
        return list((await self._json("GET", "/api/leaderboard", params=params))["players"])

    # -- admin ----------------------------------------------------------------------------------

    async def workers(self, admin_token: str) -> list[dict[str, Any]]:
        body = await self._json("GET", "/api/admin/workers", headers=_bearer(admin_token))
        return list(body["workers"])

    async def kill(self, admin_token: str, worker_id: str) -> int:
        """The status of the kill order: 202 ordered, 404 unknown, 409 already dead."""
        resp = await self.http.post(
            f"/api/admin/workers/{worker_id}/kill", headers=_bearer(admin_token)
        )
        return resp.status_code

    async def queue(self, admin_token: str) -> dict[str, Any]:
        return dict(await self._json("GET", "/api/admin/queue", headers=_bearer(admin_token)))
