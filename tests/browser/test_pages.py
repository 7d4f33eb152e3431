"""The player and admin pages in a real browser: a guess typed on the keyboard gets its pegs;
a worker killed mid-score from the admin page still leaves that guess scored exactly once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.running import Up

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
