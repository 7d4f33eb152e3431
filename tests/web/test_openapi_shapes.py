"""The OpenAPI components are generated from the answers' typed shapes (codemojex.views,
codemojex.json_schema): the generator maps each kind of annotation as JSON Schema says,
every component is a valid schema, and what the real server answers validates against
the component its operation names (and stops validating when a field goes missing)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

import jsonschema_rs
import pytest

import web.app  # noqa: F401 - every error class of the web layer, imported
from codemojex import views
from codemojex.errors import CodemojexError
from codemojex.json_schema import Schema, UnmappedType, schema_of
from tests.web.conftest import ADMIN_TOKEN, Served, bearer, submit
from web.openapi import openapi_document


class Inner(TypedDict):
    n: int


class Shape(TypedDict):
    """A shape, described."""

    name: str
    maybe: int | None
    inner: Inner | None
    many: list[Inner]
    counts: dict[str, float]
    kind: Literal["a", "b"]
    fixed: Literal["only"]
    anything: Any
    later: NotRequired[Annotated[list[str] | None, Schema(description="when known")]]


def test_the_generator_maps_each_annotation() -> None:
    schema = schema_of(Shape, {Inner: "Inner"})
    assert schema == {
        "type": "object",
        "description": "A shape, described.",
        "properties": {
            "name": {"type": "string"},
            "maybe": {"type": ["integer", "null"]},
            "inner": {"oneOf": [{"$ref": "#/components/schemas/Inner"}, {"type": "null"}]},
            "many": {"type": "array", "items": {"$ref": "#/components/schemas/Inner"}},
            "counts": {"type": "object", "additionalProperties": {"type": "number"}},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "fixed": {"type": "string", "const": "only"},
            "anything": {},
            "later": {
                "type": ["array", "null"],
                "items": {"type": "string"},
                "description": "when known",
            },
        },
        # NotRequired written as a string (from __future__ import annotations) is still
        # optional, though Python 3.11's __required_keys__ says otherwise.
        "required": ["name", "maybe", "inner", "many", "counts", "kind", "fixed", "anything"],
    }
    # Unnamed, a nested shape is written out in place.
    assert schema_of(Shape)["properties"]["many"]["items"] == {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }


@pytest.mark.parametrize("tp", [set[int], tuple[int, str], dict[int, str], int | str | None])
def test_a_type_without_a_json_schema_is_refused(tp: Any) -> None:
    with pytest.raises(UnmappedType):
        schema_of(tp)


def test_every_component_is_a_valid_json_schema() -> None:
    for name, schema in openapi_document()["components"]["schemas"].items():
        assert jsonschema_rs.meta.is_valid(schema), name  # against the 2020-12 meta-schema


def test_the_error_codes_are_those_the_errors_carry() -> None:
    def subclasses(cls: type[CodemojexError]) -> list[type[CodemojexError]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    raised = {c.code for c in subclasses(CodemojexError)}
    # web/door/ sheds with 503 overloaded from the ASGI layer, before any handler.
    assert set(views.ERROR_CODES) == raised | {"overloaded"}


def _validator(component: str) -> Any:
    doc = openapi_document()
    schema = {"$ref": f"#/components/schemas/{component}", "components": doc["components"]}
    return jsonschema_rs.validator_for(schema)


async def test_the_answers_match_their_generated_components(served: Served) -> None:
    http = served.http
    player = await served.new_player()
    token = player["token"]
    round_ = await served.current_round()
    job_id = await submit(served, token, round_["round_id"], round_["palette"][: round_["length"]])
    admin = bearer(ADMIN_TOKEN)
    answers = {
        "NewPlayer": player,
        "Round": round_,
        "Guesses": (
            await http.get(f"/api/guesses?round_id={round_['round_id']}", headers=bearer(token))
        ).json(),
        "Guess": (await http.get(f"/api/guesses/{job_id}", headers=bearer(token))).json(),
        "Leaderboard": (await http.get("/api/leaderboard")).json(),
        "Health": (await http.get("/healthz")).json(),
        "Queue": (await http.get("/api/admin/queue", headers=admin)).json(),
        "Workers": (await http.get("/api/admin/workers", headers=admin)).json(),
        "DeadJobs": (await http.get("/api/admin/dead", headers=admin)).json(),
        "Error": (await http.get(f"/api/rounds/RND_{'0' * 26}")).json(),
    }
    assert answers["Guesses"]["guesses"] and answers["Error"]["error"] == "not_found"
    for component, answer in answers.items():
        validator = _validator(component)
        errors = [e.message for e in validator.iter_errors(answer)]
        assert not errors, (component, answer, errors)
    # A field missing, or of another type, and the component says so.
    broken = {k: v for k, v in round_.items() if k != "state"}
    assert not _validator("Round").is_valid(broken)
    assert not _validator("Queue").is_valid({**answers["Queue"], "lane_count": "many"})
