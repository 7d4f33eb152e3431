"""The Python examples of echomq/README.md and docs/api/index.md run, as written, against a
real embedded Valkey, and do what they say: every job they enqueue is completed.

Each example runs in its own interpreter with only its server's URL (and data dir, and
queue name) put in place of the ones it shows; a snippet written for an async REPL (top
level ``await``) is run inside ``asyncio.run``. An example whose consumers serve forever is
stopped once the queue's ``completed`` count says every job it enqueued was served.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import echomq

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHOWN_URL = "redis://127.0.0.1:6379/0"
SHOWN_QUEUE = '"emails"'
SHOWN_DATA_DIR = '"/tmp/emq"'
# A delayed job in an example waits its 5 s, then its consumer's poll.
SERVED_WITHIN_S = 20.0


def blocks(doc: str) -> list[str]:
    return BLOCK.findall((ROOT / doc).read_text(encoding="utf-8"))


def runnable(code: str) -> str:
    """``code`` as a script: top-level ``await`` goes inside ``asyncio.run``."""
    if not re.search(r"^await ", code, re.MULTILINE):
        return code
    body = textwrap.indent(code, "    ")
    return f"import asyncio\n\n\nasync def _example() -> None:\n{body}\n\nasyncio.run(_example())\n"


# (document, block index, jobs its consumers must complete; None: it runs to its end)
EXAMPLES = [
    ("echomq/README.md", 0, 2),
    ("echomq/README.md", 1, None),
    ("docs/api/index.md", 0, 1),
]


def test_every_python_block_of_the_documents_is_listed_here() -> None:
    listed = {(doc, i) for doc, i, _ in EXAMPLES}
    found = {(doc, i) for doc in {d for d, _, _ in EXAMPLES} for i in range(len(blocks(doc)))}
    assert found == listed


async def _completed(url: str, queue: str) -> int:
    conn = echomq.connect(url)
    try:
        return int((await echomq.Queue(conn, queue).stats())["completed"])
    finally:
        await conn.aclose()


@pytest.mark.parametrize(("doc", "index", "jobs"), EXAMPLES)
def test_the_example_runs_and_serves_what_it_enqueues(
    valkey_url: str, tmp_path: Path, doc: str, index: int, jobs: int | None
) -> None:
    queue = f"readme-{uuid.uuid4().hex[:8]}"
    code = runnable(blocks(doc)[index])
    code = code.replace(SHOWN_URL, valkey_url).replace(SHOWN_QUEUE, f'"{queue}"')
    code = code.replace(SHOWN_DATA_DIR, repr(str(tmp_path / "emq")))
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        if jobs is None:
            out, _ = proc.communicate(timeout=SERVED_WITHIN_S)
            assert proc.returncode == 0, out.decode(errors="replace")
            return
        deadline = time.monotonic() + SERVED_WITHIN_S
        served = 0
        while served < jobs:
            if proc.poll() is not None:
                out = proc.stdout.read() if proc.stdout else b""
                raise AssertionError(f"{doc} example exited {proc.returncode}\n{out.decode()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{doc} example served {served} of its {jobs} jobs in {SERVED_WITHIN_S:g} s"
                )
            time.sleep(0.2)
            served = asyncio.run(_completed(valkey_url, queue))
        assert served == jobs
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
