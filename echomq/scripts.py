"""The Lua transitions: loaded from ``lua/`` once, run by EVALSHA, reloaded on NOSCRIPT."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

_LUA = Path(__file__).with_name("lua")
_INCLUDE = _LUA / "include"
_DIRECTIVE = "--@include "

Arg = str | bytes | int | float


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua script as the server sees it: its ``--@include`` lines spliced in.

    Attributes:
        name: the file's stem (``take`` for ``take.lua``).
        source: the text sent by EVAL, includes spliced.
        sha: its SHA1, what EVALSHA names it by.
    """

    name: str
    source: str
    sha: str

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, includes: Sequence[str | os.PathLike[str]] = ()
    ) -> Script:
        """Read the script at ``path``, splicing each ``--@include name`` line.

        ``name.lua`` is looked for in ``includes``, then in echomq's ``lua/include/``
        (``common``, ``pulse``, ``bucket``); not nested. One found nowhere raises
        :class:`FileNotFoundError` at load.

        Args:
            path: the ``.lua`` file.
            includes: directories of the application's own helpers, searched first.
        """
        path = Path(path)
        dirs = [*(Path(d) for d in includes), _INCLUDE]
        source = _splice(path, dirs)
        return cls(path.stem, source, hashlib.sha1(source.encode()).hexdigest())

    async def run(self, conn: Any, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """The script's reply: EVALSHA on ``conn``, re-sent as EVAL on NOSCRIPT."""
        return await _eval(conn, self, keys, args)


def _splice(path: Path, dirs: Sequence[Path]) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith(_DIRECTIVE):
            name = line.split()[1]
            found = next((d / f"{name}.lua" for d in dirs if (d / f"{name}.lua").is_file()), None)
            if found is None:
                raise FileNotFoundError(f"{path}: --@include {name}: no {name}.lua in {dirs}")
            lines.append(found.read_text())
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def _load_all() -> dict[str, Script]:
    return {path.stem: Script.from_file(path) for path in sorted(_LUA.glob("*.lua"))}


async def _eval(conn: Any, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    try:
        return await conn.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return await conn.eval(script.source, len(keys), *keys, *args)


SCRIPTS: dict[str, Script] = _load_all()

Call = tuple[Script, Sequence[str], Sequence[Arg]]
"""One script call: the script, its ``KEYS``, its ``ARGV``."""


class Runner:
    """Runs scripts on one connection, declaring ``fence`` (``Keys.fence``) after every
    call's keys; scripts never read ``#KEYS``, so one more key changes nothing they do."""

    def __init__(self, conn: Any, fence: str | None = None) -> None:
        self.conn = conn
        self.fence = fence

    def _keys(self, keys: Sequence[str]) -> Sequence[str]:
        return keys if self.fence is None else [*keys, self.fence]

    async def run(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        return await _eval(self.conn, script, self._keys(keys), args)

    def evalsha(self, call: Call) -> tuple[Arg, ...]:
        """``call`` as the EVALSHA command this runner would send (no NOSCRIPT fallback)."""
        script, keys, args = call
        keys = self._keys(keys)
        return ("EVALSHA", script.sha, len(keys), *keys, *args)

    async def run_replicated(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Arg],
        *,
        mark: str,
        replicas: int,
        timeout_ms: int,
    ) -> tuple[Any, int]:
        """``(reply, replicas that acknowledged it)``: the script, ``INCR mark`` and ``WAIT``
        on one connection; the mark makes WAIT cover a job the script only found (a
        replay). A call redirected in flight on a cluster confirms nothing."""
        conn = self.conn
        keys = self._keys(keys)
        cluster = hasattr(conn, "get_node_from_key")
        for cmd in (("EVALSHA", script.sha), ("EVAL", script.source)):
            if cluster:
                if getattr(conn, "_initialize", False):
                    await conn.initialize()
                node = conn.get_node_from_key(keys[0])
                pipe = conn.pipeline()
                wait: dict[str, Any] = {"target_nodes": node}
            else:
                pipe = conn.pipeline(transaction=False)
                wait = {}
            pipe.execute_command(*cmd, len(keys), *keys, *args)
            pipe.execute_command("INCR", mark)
            pipe.execute_command("WAIT", replicas, timeout_ms, **wait)
            reply, marked, acked = await pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError) and cmd[0] == "EVALSHA":
                continue
            for r in (reply, marked, acked):
                if isinstance(r, Exception):
                    raise r
            if cluster and conn.get_node_from_key(keys[0]).name != node.name:
                return reply, 0
            return reply, int(acked)
        raise AssertionError("unreachable: EVAL never answers NOSCRIPT")

    async def run_many(self, calls: Sequence[Call]) -> list[Any]:
        """Pipeline many calls in one round trip (each script atomic on its own; NOSCRIPT
        re-sent as EVAL); raises the first call's error."""
        results = await self.run_each(calls)
        for r in results:
            if isinstance(r, Exception):
                raise r
        return results

    async def run_each(self, calls: Sequence[Call]) -> list[Any]:
        """:meth:`run_many`, with each call's error in its place among the replies."""
        if not calls:
            return []
        if hasattr(self.conn, "get_node_from_key"):
            # redis-py's cluster pipeline refuses EVALSHA: concurrent calls instead.
            return list(
                await asyncio.gather(*(self.run(*call) for call in calls), return_exceptions=True)
            )
        calls = [(script, self._keys(keys), args) for script, keys, args in calls]
        pipe = self.conn.pipeline(transaction=False)
        for script, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        results: list[Any] = await pipe.execute(raise_on_error=False)
        redo = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if redo:
            pipe = self.conn.pipeline(transaction=False)
            for i in redo:
                script, keys, args = calls[i]
                pipe.eval(script.source, len(keys), *keys, *args)
            for i, r in zip(redo, await pipe.execute(raise_on_error=False), strict=True):
                results[i] = r
        return results
