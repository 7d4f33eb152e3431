"""Orders that travel through Valkey to a worker process or its supervisor, wherever it runs.

* kill: ``RPUSH`` to ``keys.kill_key(worker_id)``; the worker process BLPOPs its own key,
  writes down the jobs it is scoring at that instant (``killed``), and SIGKILLs itself at
  once — mid-score if it is scoring, exactly as a crash would.
* spawn: ``RPUSH`` to ``keys.spawn_key(supervisor_id)``; a supervisor BLPOPs its key and
  starts one more worker.
* exits: supervisors record why each worker died, for the admin page.
"""

from __future__ import annotations

from typing import Any

import orjson

from codemojex import keys

SUPERVISOR_TTL_MS = 5_000
KNOWN_KEEP = 200


async def order_kill(conn: Any, worker_id: str) -> None:
    pipe = conn.pipeline(transaction=True)
    pipe.rpush(keys.kill_key(worker_id), "kill")
    pipe.expire(keys.kill_key(worker_id), 60)  # an order for a worker that is gone must not linger
    await pipe.execute()


def record_killed_sync(conn: Any, worker_id: str, job_ids: list[str]) -> None:
    """Synchronous on purpose: called between the snapshot of the jobs being scored and the
    SIGKILL, it lets no other task of the event loop run — no handler returns, no
    completion leaves — so every job listed is one whose lease the kill leaves behind."""
    conn.hset(keys.KILLED, worker_id, orjson.dumps(job_ids))


async def killed(conn: Any) -> dict[str, list[str]]:
    return await _json_hash(conn, keys.KILLED)


async def record_exit(conn: Any, worker_id: str, reason: str, pid: int | None) -> None:
    await conn.hset(
        keys.EXITS,
        worker_id,
        orjson.dumps({"reason": reason, "at_ms": await server_ms(conn), "pid": pid}),
    )


async def exits(conn: Any) -> dict[str, dict[str, Any]]:
    return await _json_hash(conn, keys.EXITS)


async def _json_hash(conn: Any, key: str) -> dict[str, Any]:
    """A hash of worker_id -> JSON, decoded."""
    raw = await conn.hgetall(key)
    return {(k.decode() if isinstance(k, bytes) else k): orjson.loads(v) for k, v in raw.items()}


async def remember_worker(conn: Any, worker_id: str) -> None:
    """List the worker on the admin page; the oldest beyond ``KNOWN_KEEP`` are forgotten,
    with their exit and kill records, so these keys stay bounded however many die."""
    await conn.zadd(keys.KNOWN, {worker_id: await server_ms(conn)}, nx=True)
    old = await conn.zrange(keys.KNOWN, 0, -KNOWN_KEEP - 1)
    if old:
        pipe = conn.pipeline(transaction=False)
        pipe.hdel(keys.EXITS, *old)
        pipe.hdel(keys.KILLED, *old)
        pipe.zrem(keys.KNOWN, *old)
        await pipe.execute()


async def server_ms(conn: Any) -> int:
    secs, micros = await conn.time()
    return int(secs) * 1000 + int(micros) // 1000


async def beat_supervisor(conn: Any, supervisor_id: str, pid: int, host: str) -> None:
    """Supervisors beat about once a second, stamped on the server clock."""
    await conn.hset(
        keys.SUPERVISORS,
        supervisor_id,
        orjson.dumps({"pid": pid, "host": host, "beat_ms": await server_ms(conn)}),
    )


async def live_supervisor(conn: Any) -> str | None:
    """A supervisor that beat within the last few seconds, if any."""
    now = await server_ms(conn)
    for sid, raw in (await conn.hgetall(keys.SUPERVISORS)).items():
        if now - orjson.loads(raw)["beat_ms"] < SUPERVISOR_TTL_MS:
            return sid.decode() if isinstance(sid, bytes) else sid
    return None


async def order_spawn(conn: Any, supervisor_id: str, worker_id: str) -> None:
    await conn.rpush(keys.spawn_key(supervisor_id), worker_id)
