"""The game benchmark's core on a tiny configuration against a real ``codemojex up``, so the
instrument cannot rot unnoticed. Structural truths only: no figure is held to a speed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

import bench.game.cli
from bench.common import machine
from bench.game.baseline import floor_ratios
from bench.game.cli import main, parse
from bench.game.measure import measure
from bench.game.options import Options, up_env
from bench.game.report_html import write_html
from bench.game.server import start_up, up_args
from bench.game.tables import print_side_by_side, print_tables
from bench.watchers.watcher import Watcher
from harness.running import Up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_every_accepted_guess_is_scored_once_and_every_process_is_measured(
    start_up: Callable[..., Up], tmp_path: Path
) -> None:
    opts = Options(
        rates=[20.0],
        duration=2.0,
        drain=20.0,
        warmup=0.5,
        players=10,
        connections=8,
        progress=False,
    )
    stopped: list[Up] = []
    rows = await measure(
        opts, lambda: start_up("--workers", "2", "--round-seconds", "600"), stopped.append
    )
    assert len(stopped) == 1
    [row] = rows
    assert row["sent"] > 0 and row["accepted"] > 0, row
    # Every accepted guess got exactly one score, on its owner's socket.
    assert row["scored"] == row["accepted"], row
    assert row["unscored"] == row["duplicate_scores"] == row["wrong_socket"] == 0, row
    assert row["unanswered"] == 0 and row["drained"], row
    assert (
        row["accepted"] + sum(row["refused"].values()) + sum(row["errors"].values()) == row["sent"]
    ), row
    # The client's own timing was measured.
    assert row["send_lag_p99_ms"] is not None and row["send_lag_p99_ms"] >= 0, row
    assert row["accept_to_score_ms"]["p50"] is not None, row
    assert row["send_to_202_ms"]["p99"] is not None, row
    # Every process of `up` was found and read, and no CPU figure is negative.
    cpu = row["cpu"]
    assert {"web", "worker", "valkey", "up", "client"} <= set(cpu["roles"]), cpu["roles"]
    assert len(cpu["workers"]) == 2, cpu["workers"]
    for p in cpu["processes"]:
        assert p["cpu_s"] >= 0 and p["ms_per_guess"] >= 0 and p["core_share"] >= 0, p
    assert cpu["others_cores"] >= 0
    # The outputs render.
    print_tables(rows, "tiny")
    page = tmp_path / "report.html"
    write_html(page, {"title": "tiny", "machine": machine(), "options": vars(opts), "rows": rows})
    assert "data:image/png;base64," in page.read_text()


async def test_a_crowd_of_watchers_is_measured_and_closed_cleanly(tmp_path: Path) -> None:
    """``--watchers 20 --rates 20 --duration 2``: the crowd's own process signs up, reads
    every frame, and reports its traffic, its CPU and the web's memory per socket."""
    opts = Options(
        rates=[20.0],
        duration=2.0,
        drain=20.0,
        warmup=0.5,
        players=5,
        connections=8,
        progress=False,
        watchers=20,
    )
    started: list[Up] = []

    def start() -> Up:
        up = start_up(
            tmp_path / f"data-{len(started)}",
            *up_args(parse(["--workers", "1"]), 1),
            env=up_env(opts),
        )
        started.append(up)
        return up

    def stop(up: Up) -> None:
        up.stop()
        up.kill_everything()

    try:
        rows = await measure(opts, start, stop)
    finally:
        for up in started:
            up.kill_everything()
    assert len(started) == 1
    [row] = rows
    assert row["scored"] == row["accepted"] > 0, row
    assert row["accept_to_score_ms"]["p99"] is not None, row
    crowd = row["watchers"]
    assert crowd["setup"]["connected"] == 20 and not crowd["setup"]["failed"], crowd
    assert crowd["watchers"] == crowd["open_at_load_end"] == 20, crowd
    assert crowd["bytes_per_s"]["mean"] > 0 and crowd["frames_per_s_all"] > 0, crowd
    assert crowd["bytes_per_s"]["max"] >= crowd["bytes_per_s"]["mean"], crowd
    assert crowd["closed"] == {}, crowd
    assert crowd["cpu_ms_per_s"] >= 0 and crowd["core_share"] >= 0, crowd
    rss = crowd["web_rss"]
    assert rss["web_processes"] == 1 and rss["before_kb"] > 0 and rss["idle_kb"] > 0, rss
    assert isinstance(rss["idle_kb_per_socket"], float), rss
    assert isinstance(rss["load_end_kb_per_socket"], float), rss
    # The watcher process is measured like ours, and every socket was closed 1000 both ways.
    assert "watchers" in row["cpu"]["roles"], row["cpu"]["roles"]
    assert crowd["end_close"]["closing"] == crowd["end_close"]["clean"] == 20, crowd
    # The outputs render, with two configurations side by side.
    print_tables(rows, "tiny crowd")
    configs = [
        {"web_processes": n, "title": f"{n} web", "rows": rows, "up_args": []} for n in (1, 2)
    ]
    print_side_by_side(configs)
    page = tmp_path / "report.html"
    result = {"title": "tiny", "machine": machine(), "options": vars(opts), "rows": rows}
    write_html(page, {**result, "configs": configs})
    text = page.read_text()
    assert "The crowd" in text and "side by side" in text, text[-2000:]


@pytest.mark.timeout(240)
def test_each_crowd_size_runs_on_its_own_up_and_is_printed_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--watchers 0,10``: two configurations, one without a watcher process, one with 10
    watchers, each on a fresh ``up`` with the same server settings; the JSON has both and
    the side-by-side table compares them, the crowd's figures blank for the first."""
    monkeypatch.setattr(bench.game.cli, "signals_raise_keyboardinterrupt", lambda: None)
    out = tmp_path / "game.json"
    page = tmp_path / "game.html"
    argv = ["--watchers", "0,10", "--rates", "20", "--duration", "2", "--players", "10"]
    argv += ["--warmup", "0.5", "--drain", "10", "--workers", "1", "--quiet"]
    assert main([*argv, "--json", str(out), "--html", str(page)]) == 0
    result = orjson.loads(out.read_bytes())
    configs = result["configs"]
    assert [(c["web_processes"], c["watchers"]) for c in configs] == [(1, 0), (1, 10)]
    assert [c["name"] for c in configs] == ["1 web, 0 watchers", "1 web, 10 watchers"]
    # The same server settings for both: the crowd is all that differs.
    assert configs[0]["up_env"] == configs[1]["up_env"] != {}, configs[0]["up_env"]
    assert result["rows"] == configs[0]["rows"] and result["options"]["watchers"] == 0
    for c in configs:
        [row] = c["rows"]
        assert row["scored"] == row["accepted"] > 0, row
        assert row["cpu"]["roles"]["web"]["ms_per_guess"] > 0, row["cpu"]["roles"]
    [bare], [crowded] = configs[0]["rows"], configs[1]["rows"]
    assert "watchers" not in bare and "watchers" not in bare["cpu"]["roles"], bare["cpu"]
    assert crowded["watchers"]["open_at_load_end"] == 10, crowded["watchers"]
    assert "watchers" in crowded["cpu"]["roles"], crowded["cpu"]["roles"]
    text = capsys.readouterr().out
    assert "configuration 2 of 2" in text, text
    table = text[text.index("configurations side by side") :]
    assert "1 web, 0 watchers" in table and "1 web, 10 watchers ÷ 1 web, 0 watchers" in table
    line = next(x for x in table.splitlines() if "B/s per watcher" in x)
    cells = [x.strip() for x in line.split("│") if x.strip()]
    # the figure, the first configuration's (blank), the second's, the ratio (none)
    assert cells[0] == "B/s per watcher" and cells[1] == "-" and cells[-1] == "-", cells
    assert float(cells[2].replace(",", "")) > 0, cells
    line = next(x for x in table.splitlines() if "web CPU ms/guess" in x)
    assert line.rstrip(" │").endswith("×"), line
    html = page.read_text()
    assert "Configurations side by side" in html and "The crowd" in html, html[-3000:]


@pytest.mark.timeout(180)
def test_the_floor_runs_first_at_the_same_rates_and_each_role_is_a_ratio_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--floor``: bench_floor at the same rates, players and workers, in the same run;
    its rows in the JSON and, per rate, each role's CPU per guess as game ÷ floor."""
    monkeypatch.setattr(bench.game.cli, "signals_raise_keyboardinterrupt", lambda: None)
    out = tmp_path / "game.json"
    argv = ["--floor", "--rates", "20", "--duration", "2", "--players", "10"]
    argv += ["--warmup", "0.5", "--drain", "10", "--workers", "1", "--quiet"]
    assert main([*argv, "--json", str(out)]) == 0
    result = orjson.loads(out.read_bytes())
    [floor], [row] = result["floor"], result["rows"]
    assert floor["accepted"] == floor["scored"] > 0 and row["scored"] == row["accepted"] > 0
    ratios = floor_ratios(floor, row)
    assert all(x is not None and x > 0 for x in ratios.values()), ratios
    text = capsys.readouterr().out
    table = text[text.index("the game vs its floor") :]
    line = next(x for x in table.splitlines() if x.lstrip("│ ").startswith("2"))
    assert line.count("×") == 4, line  # web, workers, valkey and the server


@pytest.mark.timeout(120)
def test_guesses_sent_over_the_socket_are_answered_and_scored_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--via socket``: every guess a frame on its player's websocket, each answered by an
    ``accepted`` frame (the job id the score is matched by) and scored exactly once."""
    monkeypatch.setattr(bench.game.cli, "signals_raise_keyboardinterrupt", lambda: None)
    out = tmp_path / "game.json"
    argv = ["--via", "socket", "--rates", "30", "--duration", "2", "--players", "6"]
    argv += ["--warmup", "0.5", "--drain", "10", "--workers", "1", "--quiet"]
    assert main([*argv, "--json", str(out)]) == 0
    result = orjson.loads(out.read_bytes())
    [row] = result["rows"]
    assert result["options"]["via"] == "socket"
    assert row["sent"] == row["accepted"] == row["scored"] > 0, row
    assert row["duplicate_scores"] == 0 and row["unanswered"] == 0 and row["drained"], row


class _Transport:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def _frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, n))
    elif n < 1 << 16:
        head = bytes((0x80 | opcode, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 127)) + n.to_bytes(8, "big")
    return head + payload


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 100_000])
async def test_a_watcher_counts_frames_by_their_headers_however_the_bytes_arrive(
    chunk: int,
) -> None:
    progress = b'{"type":"progress","round_id":"r","playing":3}'
    stream = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"
        + _frame(1, b'{"type":"round","state":"open"}')
        + _frame(1, progress)
        + _frame(9, b"ping")
        + _frame(1, b'{"type":"progress"' + b"x" * 70_000)  # a 64-bit length
        + _frame(1, b'{"type":"leaderboard",' + b"y" * 300)  # a 16-bit length
        + _frame(1, b"{}")  # shorter than the prefix
        + _frame(8, (4008).to_bytes(2, "big"))
    )
    w = Watcher(b"GET /ws HTTP/1.1\r\n\r\n")
    t = _Transport()
    w.connection_made(t)  # type: ignore[arg-type]
    for i in range(0, len(stream), chunk):
        w.data_received(stream[i : i + chunk])
    assert (w.frames, w.progress, w.pings) == (5, 2, 1)
    assert w.bytes == len(stream) - stream.index(b"\r\n\r\n") - 4
    assert w.code == "4008" and w.greeted.done()
    # The PONG and the close's answer are masked client frames carrying the payloads.
    pong, close = t.out[1], t.out[2]
    assert pong[0] == 0x8A and pong[1] == 0x80 | 4
    assert bytes(b ^ pong[2 + (i & 3)] for i, b in enumerate(pong[6:])) == b"ping"
    assert close[0] == 0x88 and bytes(b ^ close[2 + (i & 3)] for i, b in enumerate(close[6:])) == (
        (4008).to_bytes(2, "big")
    )
    w.connection_lost(None)
    assert w.done.done() and w.code == "4008"
