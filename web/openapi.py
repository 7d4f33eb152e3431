"""The OpenAPI 3.1 document of the HTTP API, from docs/contract.md §4.

The answers' shapes (``components.schemas``) are generated from their one declaration,
the typed shapes of ``codemojex.views`` (codemojex.json_schema). The operations are
written by hand so that they state the contract — error answers, the check order,
Retry-After — and not merely whatever the handlers happen to accept; so are the request
bodies, whose schemas are the deployment's rules (the palette, the name patterns).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import cache
from typing import Any

from codemojex import views
from codemojex.json_schema import schema_of
from codemojex.names import MAX_MARKS_PER_GRAPHEME, NAME_MAX_CHARS
from codemojex.rules import DEFAULT_LENGTH, DEFAULT_PALETTE
from web.errors import MAX_BODY_BYTES
from web.name_pattern import name_patterns
from web.parsing import MAX_IDEMPOTENCY_KEY_CHARS

# The answers' components, each generated from its shape; a shape named here is a $ref
# wherever another one holds it.
_COMPONENTS: dict[str, Any] = {
    "Error": views.ErrorBody,
    "NewPlayer": views.NewPlayer,
    "Round": views.RoundView,
    "Accepted": views.Accepted,
    "Score": views.ScoreView,
    "Guess": views.GuessView,
    "Guesses": views.Guesses,
    "Leaderboard": views.Leaderboard,
    "Health": views.Health,
    "HealthDown": views.HealthDown,
    "Worker": views.WorkerView,
    "Workers": views.Workers,
    "WorkerId": views.WorkerId,
    "KillOrdered": views.KillOrdered,
    "Queue": views.QueueView,
    "DeadJob": views.DeadJobView,
    "DeadJobs": views.DeadJobs,
    "JobState": views.JobState,
}


def _schemas() -> dict[str, Any]:
    refs = {shape: name for name, shape in _COMPONENTS.items()}
    schemas = {name: schema_of(shape, refs) for name, shape in _COMPONENTS.items()}
    schemas["NewPlayerBody"] = _obj({"name": _ref("PlayerName")})
    # GuessBody and PlayerName are the deployment's: see openapi_document().
    return schemas


_ROUND_ID: dict[str, Any] = schema_of(views.RoundId)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): {"$ref": f"#/components/responses/E{s}"} for s in statuses}


def _obj(props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        **extra,
    }


_RETRY_AFTER = {
    "Retry-After": {
        "description": "whole seconds, at least 1",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}
_RESPONSES: dict[str, Any] = {
    f"E{status}": {
        **_json(_ref("Error"), text),
        **({"headers": _RETRY_AFTER} if status in (429, 503) else {}),
    }
    for status, text in {
        400: "invalid_body (malformed JSON, lone surrogates, wrong shape) or invalid_guess",
        401: "unauthorized: missing or bad bearer token",
        403: "forbidden: not yours",
        404: "not_found: unknown round, job or path",
        405: "method_not_allowed",
        409: "round_closed, idempotency_conflict or conflict",
        408: "request_timeout: the body did not arrive in time (the connection is closed)",
        413: f"body_too_large: more than {MAX_BODY_BYTES} bytes",
        429: "lane_full: too many guesses pending (accepted, not yet scored); or "
        "rate_limited: guesses (or new players from one address) sent faster than the "
        "allowed rate (a token bucket on the server clock); retry after Retry-After",
        503: "unavailable: Valkey or SQL is down; or overloaded: this server is busy and "
        "served lighter senders first (or too many requests in flight from one address); "
        "retry after Retry-After",
    }.items()
}


def _player_name() -> dict[str, Any]:
    made_of, not_blank = name_patterns()
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": NAME_MAX_CHARS,
        "description": (
            f"1-{NAME_MAX_CHARS} code points, judged grapheme by grapheme "
            "(codemojex.names): no control, format (except U+200D inside an emoji "
            "sequence), surrogate, unassigned or line/paragraph-separator character; no "
            "character that draws nothing (default-ignorable, U+2800) as a grapheme's "
            "base; no combining mark without a base of its own or on a space; at most "
            f"{MAX_MARKS_PER_GRAPHEME} marks on one base; not blank. The patterns "
            "(ECMA-262 with the u flag; literal characters of the server's Unicode "
            "version) state the same rules by grapheme-like units: the first says what "
            "a name is made of, the second that it holds more than spaces."
        ),
        "allOf": [{"pattern": made_of}, {"pattern": not_blank}],
    }


def _guess_body(length: int, palette: Sequence[str]) -> dict[str, Any]:
    return _obj(
        {
            "round_id": _ROUND_ID,
            "guess": {
                "type": "array",
                "description": "exactly `length` emojis of the palette (GET /api/round)",
                "minItems": length,
                "maxItems": length,
                "items": {"type": "string", "enum": list(palette)},
            },
        }
    )


_PLAYER: list[dict[str, list[str]]] = [{"playerToken": []}]
_ADMIN: list[dict[str, list[str]]] = [{"adminToken": []}]
_METRICS: list[dict[str, list[str]]] = [{}, {"metricsToken": []}]  # {}: none when unset


def _op(
    summary: str,
    ok: dict[str, Any],
    errors: tuple[int, ...],
    *,
    security: list[dict[str, list[str]]] | None = None,
    body: str | None = None,
    params: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {**ok, **_errors(*errors, 405, 503)}}
    if security is not None:
        op["security"] = security
    if body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    if params:
        op["parameters"] = params
    return op


def _path_param(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query_param(name: str, required: bool) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": _ROUND_ID,
        "description": "empty: 400 invalid_body; not a known round: 404",
    }


def _health_op(summary: str, ok: str) -> dict[str, Any]:
    op = _op(summary, {"200": _json(_ref("Health"), ok)}, ())
    op["responses"]["503"] = {
        **_json(_ref("HealthDown"), "Valkey or SQL did not answer"),
        "headers": _RETRY_AFTER,
    }
    return op


def _admin_op(
    summary: str,
    ok: dict[str, Any],
    *errors: int,
    params: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An admin endpoint: the admin token, so a 401 besides ``errors``."""
    return _op(summary, ok, (401, *errors), security=_ADMIN, params=params)


_PATHS: dict[str, Any] = {
    "/api/players": {
        "post": _op(
            "Join: create a player",
            {"201": _json(_ref("NewPlayer"), "the player and its token")},
            (400, 408, 413, 429),
            body="NewPlayerBody",
        )
    },
    "/api/round": {
        "get": _op("The current round", {"200": _json(_ref("Round"), "the current round")}, ())
    },
    "/api/rounds/{round_id}": {
        "get": _op(
            "One round; closed rounds carry the secret and the solvers",
            {"200": _json(_ref("Round"), "the round")},
            (404,),
            params=[_path_param("round_id", {"type": "string"})],
        )
    },
    "/api/guesses": {
        "post": {
            **_op(
                "Submit a guess (checks in order: 401, 413, 400, 404, 409, 429)",
                {"202": _json(_ref("Accepted"), "accepted (or an idempotent replay)")},
                (400, 401, 404, 408, 409, 413, 429),
                security=_PLAYER,
                body="GuessBody",
                params=[
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "description": "per player, kept 24 h; same body → same job_id; a "
                        "different body → 409 idempotency_conflict",
                        "schema": {
                            "type": "string",
                            "pattern": f"^[!-~]{{1,{MAX_IDEMPOTENCY_KEY_CHARS}}}$",
                        },
                    }
                ],
            )
        },
        "get": _op(
            "Your own guesses in a round",
            {"200": _json(_ref("Guesses"), "guesses")},
            (400, 401, 404),
            security=_PLAYER,
            params=[_query_param("round_id", True)],
        ),
    },
    "/api/guesses/{job_id}": {
        "get": _op(
            "One of your guesses, with its EchoMQ state and score",
            {"200": _json(_ref("Guess"), "the guess")},
            (401, 403, 404),
            security=_PLAYER,
            params=[_path_param("job_id", {"type": "string"})],
        )
    },
    "/api/leaderboard": {
        "get": _op(
            "All-time leaderboard, or one round's",
            {"200": _json(_ref("Leaderboard"), "players")},
            (400, 404),
            params=[_query_param("round_id", False)],
        )
    },
    "/healthz": {"get": _health_op("Valkey and SQL answer", "healthy")},
    "/readyz": {
        "get": _health_op("Ready for traffic: Valkey and SQL answer (as /healthz)", "ready")
    },
    "/livez": {
        "get": _op(
            "The process serves requests (nothing else is checked)",
            {"200": _json(_obj({"status": {"type": "string"}}), "alive")},
            (),
        )
    },
    "/metrics": {
        "get": _op(
            "Prometheus metrics; where CODEMOJEX_METRICS_TOKEN is set, only with it (401 without)",
            {
                "200": {
                    "description": "Prometheus text format",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            },
            (401,),
            security=_METRICS,
        )
    },
    "/openapi.json": {
        "get": _op("This document", {"200": _json({"type": "object"}, "OpenAPI 3.1")}, ())
    },
    "/ws": {
        "get": _op(
            "The live socket (WebSocket upgrade): round, leaderboard, replay with after=, then "
            "score (own guesses only), progress, round and leaderboard messages; the client "
            "sends {type: guess, round_id, guess, client_id}",
            {
                "101": {"description": "switching protocols"},
                "404": {
                    **_json(_ref("Error"), "not_found: a plain HTTP request, not an upgrade"),
                },
            },
            (403,),
            params=[
                {"name": "token", "in": "query", "required": True, "schema": {"type": "string"}},
                {
                    "name": "after",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "the last event_id seen",
                },
            ],
        )
    },
    "/api/admin/workers": {
        "get": _admin_op(
            "Every worker known recently",
            {"200": _json(_ref("Workers"), "workers")},
        ),
        "post": _admin_op(
            "Start one more ScoreWorker where a supervisor runs",
            {"201": _json(_ref("WorkerId"), "the new worker's id")},
            409,
        ),
    },
    "/api/admin/workers/{worker_id}/kill": {
        "post": _admin_op(
            "SIGKILL a worker process, wherever it runs",
            {"202": _json(_ref("KillOrdered"), "kill ordered")},
            404,
            409,
            params=[_path_param("worker_id", {"type": "string"})],
        )
    },
    "/api/admin/queue": {
        "get": _admin_op(
            "Queue depths, lanes and counters",
            {"200": _json(_ref("Queue"), "the queue")},
        )
    },
    "/api/admin/dead": {
        "get": _admin_op(
            "Dead jobs on the durable floor",
            {"200": _json(_ref("DeadJobs"), "dead jobs")},
        )
    },
    "/api/admin/dead/{job_id}/retry": {
        "post": _admin_op(
            "Put a dead job back on its lane",
            {"202": _json(_ref("JobState"), "retried")},
            404,
            409,
            params=[_path_param("job_id", {"type": "string"})],
        )
    },
    "/api/admin/dead/{job_id}": {
        "delete": _admin_op(
            "Discard a dead job",
            {"200": _json(_ref("JobState"), "discarded")},
            404,
            params=[_path_param("job_id", {"type": "string"})],
        )
    },
}


@cache
def openapi_document(
    length: int = DEFAULT_LENGTH, palette: tuple[str, ...] = DEFAULT_PALETTE
) -> dict[str, Any]:
    """The document for a deployment whose guesses are ``length`` emojis of ``palette``:
    built once per process, on first use (the name patterns take a moment); read-only."""
    schemas = {
        **_schemas(),
        "PlayerName": _player_name(),
        "GuessBody": _guess_body(length, palette),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Codemojex",
            "version": "1",
            "description": (
                "Real-time many-player emoji Mastermind. Bodies are JSON, at most "
                f'{MAX_BODY_BYTES} bytes. Every error is {{"error": code, "detail": text}}.'
            ),
        },
        "paths": copy.deepcopy(_PATHS),
        "components": {
            "schemas": schemas,
            "responses": copy.deepcopy(_RESPONSES),
            "securitySchemes": {
                "playerToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the token from POST /api/players",
                },
                "adminToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "CODEMOJEX_ADMIN_TOKEN (or the generated one)",
                },
                "metricsToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "CODEMOJEX_METRICS_TOKEN, where it is set",
                },
            },
        },
    }
