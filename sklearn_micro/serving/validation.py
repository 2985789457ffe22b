"""The service's requests: parsing and validating their JSON bodies.

Every check names the field it refused and what it expected, as a `RequestError` with the
HTTP status the service answers with (400 for a body that is not JSON, 413 for too much,
422 for a field of the wrong type or value, 409 for a chunk the service has closed already).
Nothing here touches a model: the id kinds and the limits are handed in. Each body's fields
are defined once, as `Field` records in `BODIES`: the parsers take their names, which are
required, their defaults and their limits from there, and the OpenAPI document
(`sklearn_micro.serving.openapi`) writes its request schemas from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import orjson

__all__ = ["BODIES", "ChunkRequest", "EngagementsRequest", "ExplainRequest", "Field",
           "Limits", "RecommendRequest", "RequestError", "SimilarRequest", "parse_chunk",
           "parse_close",
           "parse_engagements", "parse_explain", "parse_json", "parse_recommend",
           "parse_similar"]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class RequestError(Exception):
    """A request the service refuses: its HTTP status, the field and the reason."""

    def __init__(self, status: int, field: str | None, message: str, *,
                 headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message
        self.headers = headers or {}

    def as_dict(self) -> dict:
        return {"error": self.message, "field": self.field}


@dataclass(frozen=True)
class Limits:
    """What one request may ask for.

    Attributes
    ----------
    max_users : int
        Users of one ``/recommend`` (items of one ``/similar`` or ``/explain``): more is a 413.
    max_m : int
        Largest ``m``: more is a 422.
    max_filter_ids : int
        Ids in ``exclude``, ``allow`` and ``history`` of one request, together: more is a 413.
    max_body_bytes : int
        Body of a request other than ``/chunks``: more is a 413.
    max_chunk_bytes : int
        Body of a ``/chunks`` request: more is a 413.
    max_engagements : int
        Engagements of one ``/engagements`` request: more is a 413.
    max_engagements_bytes : int
        Body of an ``/engagements`` request: more is a 413.
    """

    max_users: int = 1000
    max_m: int = 1000
    max_filter_ids: int = 100_000
    max_body_bytes: int = 4 * 2**20
    max_chunk_bytes: int = 512 * 2**20
    max_engagements: int = 100_000
    max_engagements_bytes: int = 32 * 2**20


@dataclass(frozen=True)
class Field:
    """One field of a request body, as its parser accepts it.

    Attributes
    ----------
    name : str
        Its name in the JSON object.
    value : str
        What it holds: ``"user"`` (one user id), ``"users"`` (a list of user ids),
        ``"items"`` (a list of item ids), ``"item rows"`` (a list of lists of item ids, one
        per row), ``"items or rows"`` (either: one list for every row, or one per row),
        ``"m"`` (an integer from 1), ``"bool"`` or ``"chunk"`` (a 64-bit integer).
    required : bool
        Whether a body without it is refused (a 422).
    default : object
        Its value when absent (None: absent).
    most : str or None
        The `Limits` attribute that bounds it: the length of a list (more is a 413), the
        value of ``m`` (more is a 422).
    description : str
        What it means, for the OpenAPI document.
    """

    name: str
    value: str
    required: bool = False
    default: object = None
    most: str | None = None
    description: str = ""

    def most_of(self, limits: Limits) -> int:
        """The bound ``limits`` sets on it."""
        return getattr(limits, self.most)


def _body(*fields: Field) -> dict[str, Field]:
    return {f.name: f for f in fields}


_ROWS_FILTER = ("one list for every {row}, or one list per {row} (as many lists as "
                "{rows})")

#: The fields of each request body, by the name of its OpenAPI schema.
BODIES: dict[str, dict[str, Field]] = {
    "RecommendRequest": _body(
        Field("users", "users", required=True, most="max_users",
              description="the users to recommend to, one answer row each"),
        Field("m", "m", default=100, most="max_m", description="items per user"),
        Field("exclude_seen", "bool", default=False,
              description="leave out the items each user has already engaged with (in "
                          "the model's logs, and in history)"),
        Field("exclude", "items or rows", description="items never returned: "
              + _ROWS_FILTER.format(row="user", rows="users")),
        Field("allow", "items or rows", description="candidates restricted to these items: "
              + _ROWS_FILTER.format(row="user", rows="users")),
        Field("history", "item rows", description="per user, the items engaged with since "
                                                  "the latest chunk"),
    ),
    "SimilarRequest": _body(
        Field("items", "items", required=True, most="max_users",
              description="the items to find neighbours of, one answer row each"),
        Field("m", "m", default=100, most="max_m", description="similar items per item"),
        Field("exclude", "items or rows", description="items never returned: "
              + _ROWS_FILTER.format(row="item", rows="items")),
        Field("allow", "items or rows", description="candidates restricted to these items: "
              + _ROWS_FILTER.format(row="item", rows="items")),
    ),
    "ExplainRequest": _body(
        Field("user", "user", required=True, description="the one user explained for"),
        Field("items", "items", required=True, most="max_users",
              description="the items whose scores are explained"),
        Field("history", "items", description="the items the user engaged with since the "
                                              "latest chunk"),
    ),
    "ChunkRequest": _body(
        Field("chunk", "chunk", required=True,
              description="newer than every chunk live or queued"),
        Field("user", "users", required=True, description="the engagements' users"),
        Field("item", "items", required=True, description="the engagements' items, as "
                                                          "many as users"),
    ),
    "EngagementsRequest": _body(
        Field("user", "users", required=True, most="max_engagements",
              description="the engagements' users"),
        Field("item", "items", required=True, most="max_engagements",
              description="the engagements' items, as many as users"),
        Field("chunk", "chunk", description="the open chunk (the default) or the next one, "
                                            "which closes the open one"),
    ),
    "CloseRequest": _body(
        Field("chunk", "chunk", description="the open chunk (the default)"),
    ),
}
RECOMMEND, SIMILAR, EXPLAIN = (BODIES[name] for name in (
    "RecommendRequest", "SimilarRequest", "ExplainRequest"))
CHUNK, ENGAGEMENTS, CLOSE = (BODIES[name] for name in (
    "ChunkRequest", "EngagementsRequest", "CloseRequest"))


@dataclass(frozen=True)
class RecommendRequest:
    """A ``/recommend`` request, parsed and checked (`parse_recommend`)."""

    endpoint: ClassVar[str] = "recommend"
    users: list
    m: int
    exclude_seen: bool = False
    exclude: list | None = None
    allow: list | None = None
    history: list | None = None
    # whether exclude / allow are lists of lists aligned with users
    exclude_rows: bool = False
    allow_rows: bool = False

    def key(self) -> tuple:
        """Requests of equal keys are answered together by one call."""
        return (self.endpoint, self.m, self.exclude_seen, self.exclude is None,
                self.allow is None, self.history is None)

    @property
    def n(self) -> int:
        return len(self.users)


@dataclass(frozen=True)
class SimilarRequest:
    """A ``/similar`` request, parsed and checked (`parse_similar`)."""

    endpoint: ClassVar[str] = "similar"
    items: list
    m: int
    exclude: list | None = None
    allow: list | None = None
    exclude_rows: bool = False
    allow_rows: bool = False

    def key(self) -> tuple:
        return (self.endpoint, self.m, self.exclude is None, self.allow is None)

    @property
    def n(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class ExplainRequest:
    user: object
    items: list
    history: list | None = None


@dataclass(frozen=True)
class ChunkRequest:
    chunk: int
    user: list = field(repr=False)
    item: list = field(repr=False)


@dataclass(frozen=True)
class EngagementsRequest:
    """Engagements of the open chunk (``chunk`` None), or of the chunk ``chunk``."""

    chunk: int | None
    user: list = field(repr=False)
    item: list = field(repr=False)

    @property
    def n(self) -> int:
        return len(self.user)


_KIND_NAMES = {"int": "an integer", "str": "a string"}


def parse_json(body: bytes) -> dict:
    """The body as a JSON object, or a 400 (not JSON) or 422 (not an object)."""
    if not body:
        raise RequestError(400, None, "the request has no body; expected a JSON object.")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(400, None, f"the body is not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise RequestError(422, None, f"the body must be a JSON object; got "
                                      f"{_json_type(value)}.")
    return value


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _check_fields(body: dict, fields: dict[str, Field]) -> None:
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise RequestError(422, unknown[0], f"unknown field {unknown[0]!r}; the fields are "
                                            f"{', '.join(fields)}.")
    for name, f in fields.items():
        if f.required and name not in body:
            raise RequestError(422, name, f"the field {name!r} is missing.")


def check_id(value, kind: str, where: str, what: str):
    """One id of ``kind`` ("int" or "str")."""
    if kind == "int":
        if type(value) is int and INT64_MIN <= value <= INT64_MAX:
            return value
        if type(value) is int:
            raise RequestError(422, where, f"{what} ids are 64-bit integers; {value} is out "
                                           f"of range.")
    elif type(value) is str:
        return value
    raise RequestError(422, where, f"expected {_KIND_NAMES[kind]} {what} id (the model's "
                                   f"{what} ids are {kind}); got {_json_type(value)}.")


def check_ids(values, kind: str, name: str, what: str) -> list:
    """A flat list of ids of ``kind``."""
    if not isinstance(values, list):
        raise RequestError(422, name, f"expected a list of {what} ids; got "
                                      f"{_json_type(values)}.")
    wanted = int if kind == "int" else str
    for j, value in enumerate(values):
        if type(value) is not wanted or (
                wanted is int and not INT64_MIN <= value <= INT64_MAX):
            if isinstance(value, list):
                raise RequestError(422, f"{name}[{j}]", f"{name} is a flat list of {what} "
                                                        f"ids; got a list at position {j}.")
            check_id(value, kind, f"{name}[{j}]", what)
    return values


def _check_m(body: dict, fields: dict[str, Field], limits: Limits) -> int:
    spec = fields["m"]
    m = body.get("m", spec.default)
    if type(m) is not int:
        raise RequestError(422, "m", f"m must be an integer; got {_json_type(m)}.")
    most = spec.most_of(limits)
    if not 1 <= m <= most:
        raise RequestError(422, "m", f"m must be between 1 and {most}; got {m}.")
    return m


def _check_count(body: dict, spec: Field, limits: Limits, noun: str | None = None) -> None:
    """At most ``spec``'s bound of values in the list ``body[spec.name]`` (a 413 naming
    them as ``noun``, default the field's name); anything else is checked later."""
    values = body[spec.name]
    most = spec.most_of(limits)
    if isinstance(values, list) and len(values) > most:
        raise RequestError(413, spec.name, f"at most {most} {noun or spec.name} per request; "
                                           f"got {len(values)}. Split the request.")


def _check_filter(body: dict, name: str, kind: str, n_rows: int, rows_of: str):
    """``exclude`` or ``allow``: None, a flat list of item ids, or a list of ``n_rows``
    lists. Returns (value, is_rows, count)."""
    value = body.get(name)
    if value is None:
        return None, False, 0
    if not isinstance(value, list):
        raise RequestError(422, name, f"{name} must be a list of item ids, or a list of lists "
                                      f"of item ids, one per {rows_of[:-1]}; got "
                                      f"{_json_type(value)}.")
    if value and all(isinstance(row, list) for row in value):
        if len(value) != n_rows:
            raise RequestError(422, name, f"{name} as a list of lists must hold one list per "
                                          f"{rows_of[:-1]}: {n_rows} lists; got "
                                          f"{len(value)}.")
        for j, row in enumerate(value):
            check_ids(row, kind, f"{name}[{j}]", "item")
        return value, True, sum(len(row) for row in value)
    if any(isinstance(row, list) for row in value):
        j = next(j for j, row in enumerate(value) if not isinstance(row, list))
        raise RequestError(422, f"{name}[{j}]", f"{name} must be a flat list of item ids or a "
                                                f"list of lists; it mixes both (position {j} "
                                                f"is {_json_type(value[j])}).")
    return check_ids(value, kind, name, "item"), False, len(value)


def _check_filter_count(counts: dict, limits: Limits) -> None:
    """``counts``: ids per field among exclude, allow and history."""
    total = sum(counts.values())
    if total > limits.max_filter_ids:
        largest = max(counts, key=counts.get)
        raise RequestError(413, largest, f"at most {limits.max_filter_ids} ids in exclude, "
                                         f"allow and history together; got {total} "
                                         f"({counts[largest]} in {largest}).")


def _check_bool(body: dict, spec: Field) -> bool:
    name = spec.name
    value = body.get(name, spec.default)
    if type(value) is not bool:
        raise RequestError(422, name, f"{name} must be true or false; got "
                                      f"{_json_type(value)}.")
    return value


def parse_recommend(body: dict, user_kind: str, item_kind: str, limits: Limits,
                    ) -> RecommendRequest:
    """``POST /recommend``: ``{"users": [...], "m": 100, "exclude_seen": false, "exclude":
    [...], "allow": [...], "history": [[...], ...]}``."""
    _check_fields(body, RECOMMEND)
    _check_count(body, RECOMMEND["users"], limits)
    users = check_ids(body["users"], user_kind, "users", "user")
    m = _check_m(body, RECOMMEND, limits)
    exclude_seen = _check_bool(body, RECOMMEND["exclude_seen"])
    exclude, exclude_rows, n_exclude = _check_filter(body, "exclude", item_kind, len(users),
                                                     "users")
    allow, allow_rows, n_allow = _check_filter(body, "allow", item_kind, len(users), "users")
    history = body.get("history")
    n_history = 0
    if history is not None:
        if not isinstance(history, list) or not all(isinstance(r, list) for r in history):
            raise RequestError(422, "history", "history must be a list of lists of item ids, "
                                               "one per user (the items each user engaged "
                                               "with since the latest chunk).")
        if len(history) != len(users):
            raise RequestError(422, "history", f"history must hold one list per user: "
                                               f"{len(users)} lists; got {len(history)}.")
        for j, row in enumerate(history):
            check_ids(row, item_kind, f"history[{j}]", "item")
        n_history = sum(len(row) for row in history)
    _check_filter_count({"exclude": n_exclude, "allow": n_allow, "history": n_history},
                        limits)
    return RecommendRequest(users, m, exclude_seen, exclude, allow, history, exclude_rows,
                            allow_rows)


def parse_similar(body: dict, item_kind: str, limits: Limits) -> SimilarRequest:
    """``POST /similar``: ``{"items": [...], "m": 100, "exclude": [...], "allow": [...]}``."""
    _check_fields(body, SIMILAR)
    _check_count(body, SIMILAR["items"], limits)
    items = check_ids(body["items"], item_kind, "items", "item")
    m = _check_m(body, SIMILAR, limits)
    exclude, exclude_rows, n_exclude = _check_filter(body, "exclude", item_kind, len(items),
                                                     "items")
    allow, allow_rows, n_allow = _check_filter(body, "allow", item_kind, len(items), "items")
    _check_filter_count({"exclude": n_exclude, "allow": n_allow}, limits)
    return SimilarRequest(items, m, exclude, allow, exclude_rows, allow_rows)


def parse_explain(body: dict, user_kind: str, item_kind: str, limits: Limits,
                  ) -> ExplainRequest:
    """``POST /explain``: ``{"user": u, "items": [...], "history": [...]}``."""
    _check_fields(body, EXPLAIN)
    user = body["user"]
    if isinstance(user, list):
        raise RequestError(422, "user", "user is a single user id; got a list (explain "
                                        "answers for one user at a time).")
    check_id(user, user_kind, "user", "user")
    _check_count(body, EXPLAIN["items"], limits)
    items = check_ids(body["items"], item_kind, "items", "item")
    history = body.get("history")
    if history is not None:
        history = check_ids(history, item_kind, "history", "item")
        _check_filter_count({"history": len(history)}, limits)
    return ExplainRequest(user, items, history)


def parse_chunk(body: dict, user_kind: str, item_kind: str) -> ChunkRequest:
    """``POST /chunks``: ``{"chunk": c, "user": [...], "item": [...]}``, one whole chunk."""
    _check_fields(body, CHUNK)
    chunk = _check_chunk(body["chunk"])
    return ChunkRequest(chunk, *_check_columns(body, user_kind, item_kind, "chunk"))


def parse_engagements(body: dict, user_kind: str, item_kind: str, limits: Limits,
                      ) -> EngagementsRequest:
    """``POST /engagements``: ``{"user": [...], "item": [...], "chunk": c}``, ``chunk``
    optional (the open chunk)."""
    _check_fields(body, ENGAGEMENTS)
    chunk = body.get("chunk")
    if chunk is not None:
        chunk = _check_chunk(chunk)
    _check_count(body, ENGAGEMENTS["user"], limits, "engagements")
    _check_count(body, ENGAGEMENTS["item"], limits, "engagements")
    return EngagementsRequest(chunk, *_check_columns(body, user_kind, item_kind, "request"))


def parse_close(body: dict) -> int | None:
    """``POST /chunks/close``: ``{}`` or ``{"chunk": c}``, the open chunk."""
    _check_fields(body, CLOSE)
    chunk = body.get("chunk")
    return None if chunk is None else _check_chunk(chunk)


def _check_chunk(chunk) -> int:
    if type(chunk) is not int or not INT64_MIN <= chunk <= INT64_MAX:
        raise RequestError(422, "chunk", f"chunk must be a 64-bit integer (larger is later); "
                                         f"got {_json_type(chunk)}.")
    return chunk


def _check_columns(body: dict, user_kind: str, item_kind: str, what: str) -> tuple[list, list]:
    """The ``user`` and ``item`` columns of engagements: ids of the model's kinds, of equal
    and non-zero length."""
    user = check_ids(body["user"], user_kind, "user", "user")
    item = check_ids(body["item"], item_kind, "item", "item")
    if len(user) != len(item):
        raise RequestError(422, "item", f"user and item are the {what}'s columns and must be "
                                        f"of equal length; got {len(user)} users and "
                                        f"{len(item)} items.")
    if not user:
        raise RequestError(422, "user", f"the {what} holds no engagements.")
    return user, item


def as_id_array(values: list, kind: str) -> np.ndarray:
    """Validated ids as the array the estimators take."""
    if kind == "int":
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=str) if values else np.empty(0, dtype="<U1")
