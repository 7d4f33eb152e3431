"""A plain EchoMQ consumer process for the chaos tests (forked by ``tests.chaos.zygote``).

Modes:

* ``hang``: the handler notes ``start <job> <token> <claimed_at_ms>`` and never returns;
* ``work``: the handler notes ``claim <job> <token> <claimed_at_ms> <enqueued_at_ms>
  <worker>``, sleeps ``work_ms`` and returns; a job whose payload has ``"poison": true``
  notes ``poison <job> <token> <worker> held=[…]`` and SIGKILLs its own process instead.

Every line goes to ``note`` (one ``write`` of a short line with O_APPEND: lines from many
processes never interleave). ``claimed_at_ms`` is the server clock at the claim
(``lease_until_ms - lease_ms``).
"""

from __future__ import annotations

import asyncio
import os
import signal

import redis.asyncio

import echomq


def _note(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def run(
    worker_id: str,
    *,
    url: str,
    queue: str,
    note: str,
    mode: str,
    lease_ms: int = 2_000,
    lapse_ms: int = 500,
    reap_interval_ms: int = 200,
    concurrency: int = 1,
    work_ms: int = 20,
    reaper: bool = True,
) -> None:
    conn = redis.asyncio.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    q = echomq.Queue(conn, queue)

    async def handler(claim: echomq.Claim) -> dict[str, str]:
        claimed_at = claim.lease_until_ms - lease_ms
        if mode == "hang":
            _note(note, f"start {claim.job_id} {claim.token} {claimed_at}")
            await asyncio.Event().wait()
        if isinstance(claim.payload, dict) and claim.payload.get("poison"):
            _note(
                note,
                f"poison {claim.job_id} {claim.token} {worker_id} "
                f"held={[(c.job_id, c.token) for c in consumer.in_flight]}",
            )
            os.kill(os.getpid(), signal.SIGKILL)
        _note(
            note,
            f"claim {claim.job_id} {claim.token} {claimed_at} {claim.enqueued_at_ms} {worker_id}",
        )
        await asyncio.sleep(work_ms / 1000)
        return {"by": worker_id}

    consumer = echomq.Consumer(
        q,
        handler,
        lease_ms=lease_ms,
        lapse_ms=lapse_ms,
        reap_interval_ms=reap_interval_ms,
        concurrency=concurrency,
        worker_id=worker_id,
        reaper=reaper,
    )
    _note(note, f"ready {worker_id} {os.getpid()}")
    try:
        await consumer.run(install_signal_handlers=True)
    finally:
        n = consumer.counts
        _note(
            note,
            f"stopped {worker_id} completed={n.completed} "
            f"stale={n.stale} lost={n.lost} released={n.released}",
        )
        await conn.aclose()
