"""The player and admin pages in a real browser: a guess typed on the keyboard gets its pegs;
a worker killed mid-score from the admin page still leaves that guess scored exactly once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.running import Up

pytestmark = pytest.mark.browser
# Written where CI keeps artifacts; docs/screenshots holds the copies the README shows.
SHOTS = Path(__file__).parents[1] / "artifacts" / "screenshots"


def join(page: Any, base: str, name: str) -> None:
    page.goto(base + "/")
    page.get_by_test_id("join-name").fill(name)
    page.get_by_test_id("join-submit").click()
    page.get_by_test_id("key-0").wait_for(timeout=15_000)
    # The socket is live (greeted with the round) before anyone types: a guess typed while
    # a cold server is still connecting waited on the reconnect and missed its 15 s.
    page.locator('[data-testid="conn-status"][data-state="live"]').wait_for(timeout=15_000)


def type_guess(page: Any, keys: str) -> None:
    for k in keys:
        page.keyboard.press(k)
    page.keyboard.press("Enter")


def player_token(page: Any) -> str:
    return str(page.evaluate("JSON.parse(localStorage.getItem('codemojex.player')).token"))


def test_player_types_a_guess_and_sees_its_feedback(
    browser: Any, start_up: Callable[..., Up]
) -> None:
    up = start_up("--workers", "1", "--round-seconds", "300")
    page = browser.new_page(viewport={"width": 390, "height": 844})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        join(page, up.base, "Ada")
        type_guess(page, "1234")
        row = page.locator('[data-testid="guess-row"][data-state="scored"]').first
        row.wait_for(timeout=20_000)
        pegs = row.get_by_test_id("pegs")
        exact, near = int(pegs.get_attribute("data-exact")), int(pegs.get_attribute("data-near"))
        assert 0 <= exact + near <= 4
        job_id = row.get_attribute("data-job-id")
        api = httpx.get(
            f"{up.base}/api/guesses/{job_id}",
            trust_env=False,
            headers={"Authorization": f"Bearer {player_token(page)}"},
        ).json()
        assert (api["score"]["exact"], api["score"]["near"]) == (exact, near)
        assert api["guess"] == ["🍎", "🍌", "🍇", "🍒"]
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "player.png"), full_page=True)
        assert errors == []
    finally:
        page.close()


def test_admin_kills_a_worker_mid_score_and_the_guess_is_scored_once(
    browser: Any, start_up: Callable[..., Up]
) -> None:
    up = start_up("--workers", "2", "--round-seconds", "300", "--score-delay-ms", "3000")
    player = browser.new_page(viewport={"width": 390, "height": 844})
    admin = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        join(player, up.base, "Grace")
        admin.goto(up.base + "/admin")
        admin.get_by_test_id("admin-token").fill(up.admin_token)
        admin.get_by_test_id("admin-login").click()
        admin.locator('[data-testid="worker-row"][data-alive="true"]').nth(1).wait_for(
            timeout=20_000
        )

        type_guess(player, "5678")
        scoring = admin.locator('[data-testid="worker-row"][data-state="scoring"]').first
        scoring.wait_for(timeout=15_000)
        victim = scoring.get_attribute("data-worker-id")
        scoring.get_by_test_id("kill").click()

        # The dead worker shows as dead; the guess is reclaimed and scored by another.
        admin.locator(
            f'[data-testid="worker-row"][data-worker-id="{victim}"][data-alive="false"]'
        ).wait_for(timeout=15_000)
        row = player.locator('[data-testid="guess-row"][data-state="scored"]').first
        row.wait_for(timeout=30_000)
        job_id = row.get_attribute("data-job-id")
        assert player.locator(f'[data-testid="guess-row"][data-job-id="{job_id}"]').count() == 1
        api = httpx.get(
            f"{up.base}/api/guesses/{job_id}",
            trust_env=False,
            headers={"Authorization": f"Bearer {player_token(player)}"},
        ).json()
        assert api["state"] == "completed" and api["attempts"] >= 2
        listed = httpx.get(
            f"{up.base}/api/admin/workers", headers=up.admin(), trust_env=False
        ).json()["workers"]
        dead = next(w for w in listed if w["worker_id"] == victim)
        assert dead["killed_holding"] == [job_id], dead  # it died holding this guess
        held = admin.locator(
            f'[data-testid="worker-row"][data-worker-id="{victim}"] [data-testid="killed-holding"]'
        )
        held.wait_for(timeout=5_000)
        assert job_id in held.inner_text()
        queue = httpx.get(f"{up.base}/api/admin/queue", headers=up.admin(), trust_env=False).json()
        assert queue["counters"]["scored"] == 1 and queue["counters"]["reclaimed"] >= 1
        admin.wait_for_timeout(1500)  # one more poll so the log shows the rescue
        SHOTS.mkdir(parents=True, exist_ok=True)
        admin.screenshot(path=str(SHOTS / "admin.png"), full_page=True)
    finally:
        player.close()
        admin.close()


def test_a_throttled_player_sees_an_inline_notice_and_keeps_the_guess(
    browser: Any, start_up: Callable[..., Up]
) -> None:
    # One guess, then a token every 20 s: the second guess is throttled.
    up = start_up("--workers", "0", "--guess-rate", "0.05", "--guess-burst", "1")
    page = browser.new_page(viewport={"width": 390, "height": 844})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        join(page, up.base, "Mash")
        type_guess(page, "1234")
        page.locator('[data-testid="guess-row"]').first.wait_for(timeout=15_000)
        type_guess(page, "5678")
        notice = page.locator('[data-testid="error"][data-code="rate_limited"]')
        notice.wait_for(timeout=15_000)
        text = notice.inner_text()
        assert "Slow down" in text and "Try again in" in text, text
        assert page.get_by_test_id("guess-slots").get_attribute("data-count") == "4"
        assert page.locator('[role="dialog"]').count() == 0  # no modal
        assert page.locator('[data-testid="guess-row"]').count() == 1
        assert errors == []
    finally:
        page.close()


RIVALS = 25  # more than the 20 leaders a progress message carries (web.progress.LEADERS)
LEADERS = 20


def test_the_field_shows_its_leaders_the_counts_and_my_own_row(
    browser: Any, start_up: Callable[..., Up]
) -> None:
    """The player's own row comes from its own scores, so it is shown even when the server's
    leaders (at most 20, each message replacing the last) leave it out."""
    up = start_up("--workers", "1", "--round-seconds", "300")
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    http = httpx.Client(base_url=up.base, trust_env=False, timeout=10)
    try:
        join(page, up.base, "Me")
        me = str(page.evaluate("JSON.parse(localStorage.getItem('codemojex.player')).player_id"))
        counts = page.get_by_test_id("progress-counts")

        # Alone in the field: I lead it, highlighted in place, with no separate own row.
        type_guess(page, "1234")
        page.locator(
            f'[data-testid="progress-row"][data-rank="1"][data-me="true"]'
            f'[data-player-id="{me}"][data-scored="1"]'
        ).wait_for(timeout=20_000)
        page.locator(
            '[data-testid="progress-counts"][data-playing="1"][data-guesses="1"]'
        ).wait_for(timeout=10_000)
        assert page.get_by_test_id("progress-me").count() == 0

        # 25 rivals make my guess once each; then I make it a second time. Same best
        # feedback, more guesses (and, had it solved, the same solving seq): I am behind
        # every one of them, whatever the secret, so not among the 20 leaders.
        rnd = http.get("/api/round").json()
        guess = rnd["palette"][:4]
        for i in range(RIVALS):
            rival = http.post("/api/players", json={"name": f"Rival {i:02d}"}).json()
            answer = http.post(
                "/api/guesses",
                json={"round_id": rnd["round_id"], "guess": guess},
                headers={"Authorization": f"Bearer {rival['token']}"},
            )
            assert answer.status_code == 202, answer.text
        type_guess(page, "1234")

        page.locator('[data-testid="guess-row"][data-state="scored"]').nth(1).wait_for(
            timeout=20_000
        )
        job_id = page.locator('[data-testid="guess-row"]').first.get_attribute("data-job-id")
        score = http.get(
            f"/api/guesses/{job_id}", headers={"Authorization": f"Bearer {player_token(page)}"}
        ).json()["score"]
        solved = RIVALS + 1 if score["solved"] else 0

        # The counts are the whole field's, not the rows shown.
        page.locator(
            f'[data-testid="progress-counts"][data-playing="{RIVALS + 1}"]'
            f'[data-guesses="{RIVALS + 2}"][data-solved="{solved}"]'
        ).wait_for(timeout=20_000)
        assert counts.inner_text() == (
            f"{RIVALS + 1} playing · {RIVALS + 2} guesses · {solved} solved"
        )
        # Every rival scored, the leaders settle: 20 rows, all rivals, each a replacement of
        # the last message (my earlier leading row is gone, not merged in).
        page.wait_for_function(
            """(n) => {
              const rows = [...document.querySelectorAll('[data-testid="progress-row"]')];
              return rows.length === n && rows.every((r) => r.dataset.scored === '1');
            }""",
            arg=LEADERS,
            timeout=20_000,
        )
        leaders = page.locator('[data-testid="progress-row"]')
        assert leaders.count() == LEADERS
        assert page.locator('[data-testid="progress-row"][data-me="true"]').count() == 0
        ranks = [leaders.nth(i).get_attribute("data-rank") for i in range(LEADERS)]
        assert ranks == [str(i + 1) for i in range(LEADERS)]
        assert all(leaders.nth(i).get_attribute("data-guesses") == "1" for i in range(LEADERS))
        names = {leaders.nth(i).locator(".name").inner_text() for i in range(LEADERS)}
        assert names <= {f"Rival {i:02d}" for i in range(RIVALS)}, names

        # My own row, after the leaders, place unknown, from my own scores.
        mine = page.locator(f'[data-testid="progress-me"][data-player-id="{me}"][data-me="true"]')
        mine.wait_for(timeout=10_000)
        assert mine.get_attribute("data-guesses") == "2"
        assert mine.get_attribute("data-scored") == "2"
        assert mine.get_attribute("data-rank") == ""
        assert mine.locator(".rank").inner_text() == "you"
        assert "Me" in mine.locator(".name").inner_text()
        if score["solved"]:
            assert mine.get_attribute("data-solved") == "true"
        else:
            pegs = mine.get_by_test_id("best-pegs")
            assert (pegs.get_attribute("data-exact"), pegs.get_attribute("data-near")) == (
                str(score["exact"]),
                str(score["near"]),
            )
        # It is the list's last item, beside (after) the leaders.
        last = page.locator('[data-testid="progress"] > li').last
        assert last.get_attribute("data-testid") == "progress-me"
        assert page.locator('[data-testid="progress"] > li').count() == LEADERS + 1

        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "field.png"), full_page=True)
        assert errors == []
    finally:
        http.close()
        page.close()
