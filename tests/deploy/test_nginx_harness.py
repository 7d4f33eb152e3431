"""harness.nginx's transformation of the shipped config: only the loopback lines change, each
exactly once, and Debian's nginx accepts the result (``nginx -t``)."""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import pytest

from harness.nginx import SHIPPED, ConfigMismatch, loopback_config, require_nginx

SHIPPED_TEXT = SHIPPED.read_text(encoding="utf-8")


def _changes(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm=""))
    removed = [d[1:].strip() for d in diff if d.startswith("-") and not d.startswith("---")]
    added = [d[1:].strip() for d in diff if d.startswith("+") and not d.startswith("+++")]
    return removed, added


def test_only_the_loopback_lines_differ_from_the_shipped_config(tmp_path: Path) -> None:
    upstreams = [("127.0.0.1", 8101), ("127.0.0.1", 8102)]
    text = loopback_config(SHIPPED_TEXT, upstreams, 8080, tmp_path, root=True)
    removed, added = _changes(SHIPPED_TEXT, text)
    assert removed == ["server web:8000 resolve;", "listen 80;"]
    temp = [
        f"{n}_temp_path {tmp_path}/temp/{n};"
        for n in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    ]
    assert sorted(added) == sorted(
        [
            f"pid {tmp_path}/nginx.pid;",
            f"error_log {tmp_path}/error.log notice;",
            "user root;",
            *temp,
            "server 127.0.0.1:8101;",
            "server 127.0.0.1:8102;",
            "listen 127.0.0.1:8080;",
        ]
    )
    assert "user root;" not in loopback_config(SHIPPED_TEXT, upstreams, 8080, tmp_path, root=False)


@pytest.mark.parametrize(
    ("line", "what"),
    [("server web:8000 resolve;", "the upstream server"), ("listen 80;", "listen 80")],
)
def test_a_shipped_config_without_a_substituted_line_is_refused(
    tmp_path: Path, line: str, what: str
) -> None:
    changed = SHIPPED_TEXT.replace(line, line.replace(";", " ;;"), 1)
    assert changed != SHIPPED_TEXT
    with pytest.raises(ConfigMismatch, match=what):
        loopback_config(changed, [("127.0.0.1", 1)], 2, tmp_path, root=False)
    with pytest.raises(ValueError, match="upstream"):
        loopback_config(SHIPPED_TEXT, [], 2, tmp_path, root=False)


def test_debians_nginx_accepts_the_transformed_config(tmp_path: Path) -> None:
    nginx = require_nginx()
    for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp_path / "temp" / name).mkdir(parents=True)
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        loopback_config(SHIPPED_TEXT, [("127.0.0.1", 8101)], 8080, tmp_path, root=False)
    )
    done = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(conf)],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "syntax is ok" in done.stderr


def test_a_slower_limit_changes_only_the_two_limit_lines(tmp_path: Path) -> None:
    upstreams = [("127.0.0.1", 8101)]
    shipped = loopback_config(SHIPPED_TEXT, upstreams, 8080, tmp_path, root=False)
    slower = loopback_config(
        SHIPPED_TEXT, upstreams, 8080, tmp_path, root=False, limit_req=(200, 1000)
    )
    removed, added = _changes(shipped, slower)
    assert [r.split("rate=")[-1] for r in removed if "rate=" in r] == ["1000r/s;"]
    assert any("burst=3000 nodelay;" in r for r in removed) and len(removed) == 2
    assert any("rate=200r/s;" in a for a in added)
    assert any("burst=1000 nodelay;" in a for a in added) and len(added) == 2
