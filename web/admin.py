"""The admin API (docs/contract.md §4, Admin): workers, the queue, dead jobs.

Every route needs ``Authorization: Bearer <admin token>``; anything else, a player's token
included, is 401. The admin page itself (``/admin``) is public and holds no data.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from codemojex.admin import Admin
from codemojex.errors import JobNotFound
from echomq.ids import is_branded
from web.parsing import bearer_token
from web.responses import JSONResponse
from web.services import Services, services_of

MAX_WORKER_ID_CHARS = 200


def _admin(request: Request) -> tuple[Services, Admin]:
    services = services_of(request)
    services.check_admin(bearer_token(request.headers.get("authorization")))
    return services, Admin(services.game)


async def workers(request: Request) -> Response:
    # One route for both methods, so a third method's 405 names both in Allow.
    if request.method == "POST":
        return await add_worker(request)
    services, _ = _admin(request)
    return JSONResponse({"workers": await services.game.workers()})


async def add_worker(request: Request) -> Response:
    _, admin = _admin(request)
    worker_id = await admin.add_worker()
    return JSONResponse({"worker_id": worker_id}, status_code=201)


async def kill_worker(request: Request) -> Response:
    _, admin = _admin(request)
    worker_id = str(request.path_params["worker_id"])
    if len(worker_id) > MAX_WORKER_ID_CHARS:
        raise JobNotFound("no such worker")
    await admin.kill_worker(worker_id)
    return JSONResponse({"worker_id": worker_id, "state": "kill ordered"}, status_code=202)


async def queue(request: Request) -> Response:
    _, admin = _admin(request)
    return JSONResponse(await admin.queue_view())


async def dead_jobs(request: Request) -> Response:
    _, admin = _admin(request)
    return JSONResponse({"jobs": await admin.dead_jobs()})


async def retry_dead(request: Request) -> Response:
    _, admin = _admin(request)
    job_id = _job_id(request)
    await admin.retry_dead(job_id)
    return JSONResponse({"job_id": job_id, "state": "pending"}, status_code=202)


async def discard_dead(request: Request) -> Response:
    _, admin = _admin(request)
    job_id = _job_id(request)
    await admin.discard_dead(job_id)
    return JSONResponse({"job_id": job_id, "state": "discarded"})


def _job_id(request: Request) -> str:
    job_id = request.path_params["job_id"]
    if not is_branded(job_id, "JOB"):
        raise JobNotFound("no such dead job")
    return str(job_id)


routes: list[BaseRoute] = [
    Route("/api/admin/workers", workers, methods=["GET", "POST"]),
    Route("/api/admin/workers/{worker_id}/kill", kill_worker, methods=["POST"]),
    Route("/api/admin/queue", queue, methods=["GET"]),
    Route("/api/admin/dead", dead_jobs, methods=["GET"]),
    Route("/api/admin/dead/{job_id}/retry", retry_dead, methods=["POST"]),
    Route("/api/admin/dead/{job_id}", discard_dead, methods=["DELETE"]),
]
