"""The player API (docs/contract.md §4): players, rounds, guesses, the leaderboard.

Checks run in the contract's order — 401, 413, 400, 404, 409, 429 — so the token is looked
at before the body is read (a bad token with a huge body is a 401), the body's size before
its shape, and the game (:meth:`codemojex.game.Game.submit`) keeps the rest of the order.
Errors are raised, never answered here: ``web.errors`` maps them all in one place.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, request_response
from starlette.types import Receive, Scope, Send

from codemojex import store
from codemojex.errors import InvalidBody, JobNotFound, RoundNotFound, Unavailable
from echomq.ids import is_branded
from web import intake
from web.errors import RETRY_AFTER_S
from web.parsing import bearer_token, read_json_object
from web.responses import JSONResponse
from web.services import Services, services_of

HEALTH_TIMEOUT_S = 3.0


async def _player(request: Request, services: Services) -> store.Player:
    return await services.player(bearer_token(request.headers.get("authorization")))


async def create_player(request: Request) -> Response:
    services = services_of(request)
    body = await read_json_object(request)
    address = request.client.host if request.client else None
    player = await services.game.create_player(body.get("name"), address)
    return JSONResponse(
        {"player_id": player.player_id, "name": player.name, "token": player.token},
        status_code=201,
    )


async def current_round(request: Request) -> Response:
    info, now = await services_of(request).game.current_round()
    return JSONResponse(info.public(now))


async def round_by_id(request: Request) -> Response:
    round_id = request.path_params["round_id"]
    if not is_branded(round_id, "RND"):
        raise RoundNotFound("no such round")
    return JSONResponse(await services_of(request).game.round_view(round_id))


async def list_guesses(request: Request) -> Response:
    services = services_of(request)
    player = await _player(request, services)
    round_id = request.query_params.get("round_id")
    if not round_id:
        raise InvalidBody("the round_id query parameter is required")
    if not is_branded(round_id, "RND") or await services.game.rounds.get(round_id) is None:
        raise RoundNotFound("no such round")
    return JSONResponse({"guesses": await services.game.guesses_of(player.player_id, round_id)})


async def guess_by_id(request: Request) -> Response:
    services = services_of(request)
    player = await _player(request, services)
    job_id = request.path_params["job_id"]
    if not is_branded(job_id, "JOB"):
        raise JobNotFound("no such guess")
    return JSONResponse(await services.game.guess_view(player.player_id, job_id))


async def leaderboard(request: Request) -> Response:
    round_id = request.query_params.get("round_id")
    if round_id == "":
        # As for GET /api/guesses: a parameter given empty is malformed, not "all rounds".
        raise InvalidBody("round_id must not be empty (leave it out for all rounds)")
    if round_id is not None and not is_branded(round_id, "RND"):
        raise RoundNotFound("no such round")
    players = await services_of(request).game.leaderboard(round_id)
    return JSONResponse({"players": players})


async def healthz(request: Request) -> Response:
    """200 when Valkey and SQL both answer within a few seconds, else 503."""
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            health = await services_of(request).game.health()
    except TimeoutError:
        health = {"valkey": False, "sql": False}
    if all(health.values()):
        return JSONResponse({"status": "ok", **health})
    down = " and ".join(name for name, ok in health.items() if not ok)
    exc = Unavailable(f"{down} not answering", retry_after_s=RETRY_AFTER_S)
    return JSONResponse({**exc.body(), **health}, status_code=exc.status, headers=exc.headers())


async def livez(_request: Request) -> Response:
    """200 while this process serves requests at all; it looks at nothing else."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Whether this process should get traffic: Valkey and SQL answer (as ``/healthz``)."""
    return await healthz(request)


class _Guesses:
    """``/api/guesses``: ``GET`` lists a player's guesses, ``POST`` takes one (which
    ``web.app.App`` serves ahead of the router, :mod:`web.intake`). One route for both
    methods, so a third method's 405 names both in ``Allow``."""

    def __init__(self) -> None:
        self._list = request_response(list_guesses)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "POST":
            await intake.submit_guess(scope, receive, send)
        else:
            await self._list(scope, receive, send)


routes: list[BaseRoute] = [
    Route("/api/players", create_player, methods=["POST"]),
    Route("/api/round", current_round, methods=["GET"]),
    Route("/api/rounds/{round_id}", round_by_id, methods=["GET"]),
    Route("/api/guesses", _Guesses(), methods=["GET", "POST"]),
    Route("/api/guesses/{job_id}", guess_by_id, methods=["GET"]),
    Route("/api/leaderboard", leaderboard, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/livez", livez, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
