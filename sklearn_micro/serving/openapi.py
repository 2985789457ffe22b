"""The service's OpenAPI document (``GET /openapi.json``), with the served model's id kinds
and the limits filled in. Its request schemas are written from the fields that validation
checks (`sklearn_micro.serving.validation.BODIES`)."""

from __future__ import annotations

from .validation import BODIES, Field, Limits

__all__ = ["document"]


def _ids(kind: str, description: str) -> dict:
    if kind == "int":
        return {"type": "integer", "format": "int64", "description": description}
    return {"type": "string", "description": description}


def _request(fields: dict[str, Field], values: dict, limits: Limits) -> dict:
    """The schema of a request body of ``fields``; ``values`` maps each `Field.value` to
    its schema."""
    properties = {}
    for name, f in fields.items():
        schema = dict(values[f.value])
        if f.most is not None:
            schema["maximum" if schema.get("type") == "integer" else "maxItems"] = (
                f.most_of(limits))
        if f.default is not None:
            schema["default"] = f.default
        if f.description:
            schema["description"] = f.description
        properties[name] = schema
    required = [name for name, f in fields.items() if f.required]
    return {"type": "object", **({"required": required} if required else {}),
            "additionalProperties": False, "properties": properties}


def _of_interest(key: str, description: str) -> dict:
    """The schema of ``{"interest": k, key: a number}``."""
    return {"type": "object", "required": ["interest", key], "additionalProperties": False,
            "properties": {"interest": {"type": "integer"},
                           key: {"type": "number", "description": description}}}


def document(user_kind: str, item_kind: str, limits: Limits, version: str) -> dict:
    """The OpenAPI 3.1 document of a service whose model has ids of these kinds."""
    user, item = _ids(user_kind, "a user id"), _ids(item_kind, "an item id")
    pad = "-1" if item_kind == "int" else '""'
    item_list = {"type": "array", "items": item}
    item_lists = {"type": "array", "items": item_list}
    values = {"user": user, "users": {"type": "array", "items": user}, "items": item_list,
              "item rows": item_lists, "items or rows": {"oneOf": [item_list, item_lists]},
              "m": {"type": "integer", "minimum": 1}, "bool": {"type": "boolean"},
              "chunk": {"type": "integer", "format": "int64"}}
    ranked = {
        "type": "object", "required": ["items", "scores"],
        "properties": {
            "items": {"type": "array", "items": {"type": "array", "items": item},
                      "description": f"per row, the best items first; {pad} where fewer "
                                     f"than m items can be ranked"},
            "scores": {"type": "array", "items": {"type": "array",
                                                  "items": {"type": ["number", "null"]}},
                       "description": "the score of each item; null where padded"},
        },
    }
    error = {"type": "object", "required": ["error"],
             "properties": {"error": {"type": "string"},
                            "field": {"type": ["string", "null"],
                                      "description": "the field refused, as users[3]"}}}

    def ref(name):
        return {"$ref": f"#/components/schemas/{name}"}

    explained = {"type": "object", "properties": {
        "item": item, "score": {"type": ["number", "null"]},
        "terms": {"type": "array", "items": ref("ExplainTerm"),
                  "description": "the largest contribution first; none that is 0"},
        "popularity": {"type": "number"}, "personal": {"type": "number"},
        "coengagement": {"type": "number"}}}

    schemas = {
        **{name: _request(fields, values, limits) for name, fields in BODIES.items()},
        "ExplainResponse": {
            "type": "object",
            "properties": {
                "user": user,
                "interests": {"type": "array", "description": "the user's mixture: each "
                              "interest and its weight theta, summing to 1",
                              "items": ref("ExplainInterest")},
                "personal_weight": {"type": "number", "description": "lam_u: the "
                                    "model's personal weight for a user with recent "
                                    "items, else 0"},
                "items": {"type": "array", "items": explained,
                          "description": "per item, in the order given: score = sum of "
                                         "the terms' contributions + popularity + "
                                         "personal + coengagement; a null score (an "
                                         "item not ranked for "
                                         "the user) has no terms"},
            },
        },
        "ExplainInterest": _of_interest("weight", "theta: the user's weight of the interest"),
        "ExplainTerm": _of_interest("contribution", "the interest's term in the item's score"),
        "Acknowledged": {
            "type": "object", "description": "the request's engagements are synced to the "
                                             "event log",
            "properties": {"acknowledged": {"type": "integer"}, "chunk": {"type": "integer"},
                           "offset": {"type": "integer", "description": "the offset of its "
                                      "last engagement"}},
        },
        "ChunkAccepted": {
            "type": "object",
            "properties": {"status": {"const": "queued"}, "chunk": {"type": "integer"},
                           "queued": {"type": "array", "items": {"type": "integer"}}},
        },
        "Health": {
            "type": "object",
            "properties": {
                "status": {"enum": ["ok", "degraded"],
                           "description": "degraded while a close fails (see last_error)"},
                "chunk": {"type": "integer",
                          "description": "the latest chunk the served model has absorbed"},
                "model": {"type": "string",
                          "description": "the served recommender's class, as MiCRO"},
                "path": {"type": "string", "description": "the file it was loaded from"},
                "open_chunk": {"type": "integer", "description": "the chunk engagements go "
                               "to by default"},
                "engagements": {"type": "integer", "description": "the open chunk's "
                                "engagements acknowledged so far"},
                "observed": {"type": "integer", "description": "those of them the served "
                             "model has observed"},
                "offset": {"type": "integer", "description": "the event log's last durable "
                           "offset"},
                "queued": {"type": "array", "items": {"type": "integer"},
                           "description": "the closed chunks waiting to be applied, the "
                                          "one being applied first"},
                "last_error": {"type": ["object", "null"], "description": "while a close "
                               "fails: its chunk, the error, the failures so far, the wait "
                               "before the next try and the time; null otherwise"},
                "version": {"type": "string", "description": "sklearn-micro's version"},
            },
        },
        "Ranked": ranked,
        "Error": error,
    }

    def answers(ok_status, ok_schema, *errors):
        out = {str(ok_status): {"description": "the answer",
                                "content": {"application/json": {"schema": ref(ok_schema)}}}}
        for status, text in errors:
            out[str(status)] = {"description": text,
                                "content": {"application/json": {"schema": ref("Error")}}}
        return out

    bad = [(400, "the body is not JSON"), (413, "too many users, items or ids, or too large "
           "a body"), (422, "a field of the wrong type or value, or an endpoint the served "
           "model cannot answer")]

    def post(summary, request, ok_status, ok_schema, *errors):
        return {"post": {"summary": summary, "requestBody": {
            "required": True, "content": {"application/json": {"schema": ref(request)}}},
            "responses": answers(ok_status, ok_schema, *bad, *errors)}}

    return {
        "openapi": "3.1.0",
        "info": {"title": "sklearn-micro serve", "version": version},
        "paths": {
            "/health": {"get": {"summary": "the served model's chunk, once its kernels are "
                                           "warm", "responses": answers(200, "Health")}},
            "/recommend": post("the m best items of the latest chunk for each user",
                               "RecommendRequest", 200, "Ranked"),
            "/similar": post("the items most likely engaged next after each item",
                             "SimilarRequest", 200, "Ranked"),
            "/explain": post("each item's score as a sum of its terms", "ExplainRequest", 200,
                             "ExplainResponse"),
            "/engagements": post("engagements synced to the event log, then observed into "
                                 "the served model", "EngagementsRequest", 200,
                                 "Acknowledged",
                                 (409, "a chunk closed already, or not the open one or the "
                                       "next"),
                                 (429, "the queue of closes is full"),
                                 (503, "the event log could not be written: nothing was "
                                       "acknowledged")),
            "/chunks": post("one whole chunk, synced to the event log, then closed: "
                            "partial_fit in the update process, saved, swapped in",
                            "ChunkRequest", 202, "ChunkAccepted",
                            (409, "the chunk is closed already, or not the open one or the "
                                  "next"),
                            (429, "the queue is full: send again after Retry-After seconds"),
                            (503, "the event log could not be written")),
            "/chunks/close": post("close the open chunk (durable before the answer)",
                                  "CloseRequest", 202, "ChunkAccepted",
                                  (409, "not the open chunk, or the open chunk is empty"),
                                  (429, "the queue of closes is full")),
            "/metrics": {"get": {"summary": "Prometheus text", "responses": {
                "200": {"description": "metrics", "content": {"text/plain": {}}}}}},
        },
        "components": {"schemas": schemas},
    }
