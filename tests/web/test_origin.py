"""No cross-site simple writes (docs/contract.md §4): a state-changing request from a foreign
``Origin`` whose body is not declared ``application/json`` (what a hostile page can send
without a CORS preflight: a form, a ``text/plain`` fetch) is ``403 forbidden`` and changes
nothing; the server's own pages, listed origins and non-browser clients are unaffected.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.web.conftest import assert_error, serve

pytestmark = pytest.mark.timeout(60)

FOREIGN = "http://evil.example"
LISTED = "https://play.example"


def _players(sql_url: str) -> int:
    with sqlite3.connect(sql_url.partition(":///")[2]) as db:
        return int(db.execute("SELECT count(*) FROM players").fetchone()[0])


async def test_a_foreign_pages_simple_post_is_forbidden_and_changes_nothing(
    configure: Any, sql_url: str
) -> None:
    async with serve(configure(allowed_origins=(LISTED,))) as s:
        before = _players(sql_url)
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Origin": FOREIGN}
            if content_type:
                headers["Content-Type"] = content_type
            resp = await s.http.post("/api/players", content=b'{"name":"Mallory"}', headers=headers)
            assert_error(resp, 403, "forbidden")
        assert _players(sql_url) == before
        # The server's own page, a listed origin, a JSON body and a client without Origin
        # are served as before.
        own = f"http://127.0.0.1:{s.port}"
        allowed = [
            {"Origin": own, "Content-Type": "text/plain"},
            {"Origin": LISTED, "Content-Type": "text/plain"},
            {"Origin": FOREIGN, "Content-Type": "application/json; charset=utf-8"},
            {"Content-Type": "text/plain"},
        ]
        for headers in allowed:
            resp = await s.http.post("/api/players", content=b'{"name":"Ada"}', headers=headers)
            assert resp.status_code == 201, (headers, resp.text)
        assert _players(sql_url) == before + len(allowed)
        # Reads are not writes: a foreign page may still GET (it cannot read the answer).
        assert (await s.http.get("/api/round", headers={"Origin": FOREIGN})).status_code == 200
