"""The OpenAPI document matches the server: schemathesis, every operation, every check.

schemathesis (pinned in the dev group) runs through its CLI, its public interface, against
the real app under uvicorn (``web.server.server_config``, as in production) on loopback. Its
config file gives the document's two security schemes their tokens (a fresh player's and
the admin's), so every operation is exercised past its 401, and ``ignored_auth`` checks that
each one refuses a request without them. Every phase runs (examples, coverage, fuzzing,
stateful) with every check; a failure prints schemathesis's report, with a curl line per
case. Generation is deterministic and its example database off, so CI sees the same cases
on every run; :data:`MAX_EXAMPLES` per operation keeps the run to some 20-35 s.

The player-name patterns (``web.name_pattern``) get a test of their own: what they say of a
name must be what ``codemojex.names`` says of it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jsonschema_rs
import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemojex.errors import InvalidName
from codemojex.names import validate_name
from echomq.server import EmbeddedValkey
from tests.web.conftest import ADMIN_TOKEN, Served, assert_error, make_config, served_in_thread
from web.openapi import openapi_document

MAX_EXAMPLES = 15
MAX_PLAYER_EXAMPLES = 5
RUN_TIMEOUT_S = 100


@dataclass
class Running:
    base: str
    player_token: str


@pytest.fixture(scope="module")
def running(
    private_valkey: EmbeddedValkey, sql_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    # In a thread with its own event loop: the test itself only waits for a subprocess.
    config = make_config(private_valkey.url, sql_url, tmp_path_factory.mktemp("schema"))
    with served_in_thread(config, "schema-server") as port:
        base = f"http://127.0.0.1:{port}"
        player = httpx.post(f"{base}/api/players", json={"name": "Schemathesis"}).json()
        yield Running(base, player["token"])
        # It still serves after all that.
        assert httpx.get(f"{base}/livez").status_code == 200


@pytest.mark.slow
def test_the_server_answers_as_its_openapi_document_says(running: Running, tmp_path: Path) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        "[auth.openapi.playerToken]\n"
        f'bearer = "{running.player_token}"\n'
        "[auth.openapi.adminToken]\n"
        f'bearer = "{ADMIN_TOKEN}"\n'
        "[generation]\n"
        f"max-examples = {MAX_EXAMPLES}\n"
        "deterministic = true\n"  # the same cases every run; also: no example database
        # Hypothesis rebuilds the name patterns' big character classes for every case it
        # draws (about 0.3 s each), so new players get fewer cases than the rest.
        "[[operations]]\n"
        'include-path = "/api/players"\n'
        f"generation.max-examples = {MAX_PLAYER_EXAMPLES}\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "--no-color",
        "run",
        f"{running.base}/openapi.json",
        "--checks",
        "all",
        "--workers",
        "1",
        "--request-timeout",
        "10",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    done = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-20_000:]
    # It did test every operation of the document (but GET /openapi.json, which it loaded
    # the document from and leaves out), under every phase.
    operations = sum(len(item) for item in openapi_document()["paths"].values()) - 1
    assert f"{operations} selected / {operations} total" in report, report[-5_000:]
    assert f"Tested: {operations}\n" in report, report[-5_000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in report, report[-5_000:]


async def test_what_schemathesis_found_stays_fixed(served: Served) -> None:
    doc = (await served.http.get("/openapi.json")).json()
    guess = doc["components"]["schemas"]["GuessBody"]["properties"]["guess"]
    length = served.config.length
    assert (guess["minItems"], guess["maxItems"]) == (length, length)
    assert guess["items"]["enum"] == list(served.config.palette)
    # An empty round_id is malformed (400), as on GET /api/guesses; absent means all rounds.
    assert_error(await served.http.get("/api/leaderboard?round_id="), 400, "invalid_body")
    assert (await served.http.get("/api/leaderboard")).status_code == 200
    # /ws without an upgrade: the documented 404; another method: 405 naming GET.
    assert_error(await served.http.get("/ws?token=x"), 404, "not_found")
    resp = await served.http.delete("/ws")
    assert_error(resp, 405, "method_not_allowed")
    assert "GET" in resp.headers["allow"]


# -- the player-name patterns ---------------------------------------------------------------

_NAME = openapi_document()["components"]["schemas"]["PlayerName"]
_NAME_VALIDATOR = jsonschema_rs.validator_for(_NAME)

ACCEPTED = [
    "Ada",
    "José",  # é precomposed
    "Jose\u0301",  # é as e + combining acute
    "Nguyễn",  # two marks on one base
    "กล้า",  # Thai: a tone mark on a vowel sign
    "김철수",
    "\u1100\u1161\u11a8",  # Hangul jamo that make one syllable
    "👨\u200d👩\u200d👧",  # an emoji sequence joined by ZWJ
    "❤\ufe0f\u200d🔥",
    "👍🏽",  # a skin tone
    "🇫🇷",
    "Ada Lovelace",
    "\u3000Ada",
    "🏻",  # a modifier alone is drawn
    "x" * 32,
    "\ue000",  # private use
]
REFUSED = [
    "",
    " ",
    "\u3000\u00a0",
    "x" * 33,
    "Ada\n",
    "A\u0000",
    "\u200bAda",  # zero-width space (Cf)
    "Ada\u200d",  # a joiner outside an emoji sequence
    "a\u200d👩",
    "\u202eAda",  # bidi override
    "\u0301Ada",  # a mark with no base
    "Ada \u0301",  # a mark on a space
    "a\u0301\u0301\u0301\u0301",  # four marks on one base
    "\u3164",  # Hangul filler: a letter that draws nothing
    "Ada\u3164",
    "\u2800",  # Braille blank
    "\u115f\u1161",  # a syllable opened by a filler
    "a\u2028b",  # line separator
    "\u0378",  # unassigned
]


def _server_takes(name: str) -> bool:
    try:
        validate_name(name)
    except InvalidName:
        return False
    return True


@pytest.mark.parametrize("name", ACCEPTED + REFUSED)
def test_the_name_schema_says_what_the_server_refuses(name: str) -> None:
    assert _server_takes(name) == (name in ACCEPTED)
    assert _NAME_VALIDATOR.is_valid(name) == (name in ACCEPTED)


# What the patterns do not model (web.name_pattern says so): a Prepend character takes the
# next one into its grapheme, and an Indic conjunct (a virama between consonants) counts its
# marks together. Everything else they must judge as the server does.
# One scan of every code point (a regex.match per code point took 9 s of CPU at collection,
# in every xdist worker).
_UNMODELLED = "".join(
    regex.findall(
        r"\p{Grapheme_Cluster_Break=Prepend}|\p{InCB=Linker}",
        "".join(map(chr, range(sys.maxunicode + 1))),
    )
)
_TRICKY = list(
    " a\u00a0\u3000\u0301\u0300\u0903\u0e33\uff9e\ufe0f\u200d\u200b😀👩🏻🇫가\u1161\u11a8"
    "\u1160\u115f\u3164\u2800é\u0000\n"
)


@settings(
    max_examples=3_000,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.text(
        st.one_of(
            st.characters(codec="utf-8", exclude_characters=_UNMODELLED),
            st.sampled_from(_TRICKY),
        ),
        max_size=34,
    )
)
def test_the_name_schema_agrees_with_the_server_on_any_text(name: str) -> None:
    assert _NAME_VALIDATOR.is_valid(name) == _server_takes(name), [hex(ord(c)) for c in name]
