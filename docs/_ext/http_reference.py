"""Sphinx extension: the HTTP reference page, written from the service's own OpenAPI document.

At each build, ``sklearn_micro.serving.openapi.document`` (the document ``GET
/openapi.json`` answers) is rendered for a model of integer ids with the default limits,
and written to ``docs/_generated/http.md``: each endpoint, its request fields with their
types, limits and defaults, its answers and error codes, and the fields of each answer.
The page therefore follows the service without an edit; ``markdown`` is also what
``tests/test_docs.py`` checks.
"""

from __future__ import annotations

import json
from pathlib import Path

INTRO = """\
# HTTP reference

Every endpoint of `sklearn-micro serve`, its request fields and answers, as the service's
own OpenAPI document states them. Use this page to write a client; {{doc}}`/serving`
shows the service at work, {{doc}}`/online` the in-process calls the endpoints answer
with. A running service answers the same document at `GET /openapi.json`, with its
model's id kinds filled in; this page shows a model of integer ids (for string ids, ids
are strings and padding is `""`) and the default limits of
`sklearn_micro.serving.validation.Limits`: {limits}.

Every request and answer body is JSON. An error's body is `{{"error": ..., "field": ...}}`:
the message names what was expected and what was given, `field` the field refused (as
`users[3]`) or null. Every `POST` may answer these, besides the codes listed under it:
"""


def _resolve(schema: dict, doc: dict) -> dict:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    name = ref.rsplit("/", 1)[-1]
    return doc["components"]["schemas"][name]


def _type(schema: dict, doc: dict) -> str:
    """A schema's type in words: ``array of integer (int64)``, ``integer or null``."""
    if "$ref" in schema:
        return "`" + schema["$ref"].rsplit("/", 1)[-1] + "`"
    if "oneOf" in schema:
        return " or ".join(_type(s, doc) for s in schema["oneOf"])
    if "const" in schema:
        return f"`\"{schema['const']}\"`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`\"{v}\"`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        text = " or ".join(kind)
    elif kind == "array":
        text = "array of " + _type(schema["items"], doc) if "items" in schema else "array"
    else:
        text = kind
    if "format" in schema:
        text += f" ({schema['format']})"
    return text


def _limits(schema: dict) -> str:
    out = []
    if "minimum" in schema and "maximum" in schema:
        out.append(f"{schema['minimum']} to {schema['maximum']:,}")
    elif "maximum" in schema:
        out.append(f"at most {schema['maximum']:,}")
    if "maxItems" in schema:
        out.append(f"at most {schema['maxItems']:,} entries")
    return "; ".join(out)


def _cell(text: str) -> str:
    text = str(text).replace("a item id", "an item id")
    return text.replace("|", "\\|").replace("\n", " ")


def _fields(schema: dict, doc: dict, request: bool) -> list[str]:
    schema = _resolve(schema, doc)
    props = schema.get("properties", {})
    if not props:
        return []
    required = set(schema.get("required", ()))
    if request:
        lines = ["| field | type | limits | default | description |",
                 "|---|---|---|---|---|"]
    else:
        lines = ["| field | type | description |", "|---|---|---|"]
    for name, prop in props.items():
        described = _resolve(prop, doc) if "$ref" in prop else prop
        description = described.get("description", "")
        if request:
            default = ("required" if name in required else
                       f"`{json.dumps(prop['default'])}`" if "default" in prop else "absent")
            lines.append(f"| `{name}` | {_cell(_type(prop, doc))} | {_cell(_limits(prop))} "
                         f"| {default} | {_cell(description)} |")
        else:
            lines += _answer_rows(name, prop, doc)
    return lines


def _answer_rows(name: str, prop: dict, doc: dict) -> list[str]:
    """A field of an answer, and the fields of the objects it holds (``items[].score``)."""
    described = _resolve(prop, doc)
    rows = [f"| `{name}` | {_cell(_type(prop, doc))} | "
            f"{_cell(described.get('description', ''))} |"]
    inner, suffix = described, ""
    while inner.get("type") == "array" and "items" in inner:
        inner, suffix = _resolve(inner["items"], doc), suffix + "[]"
    for sub, subprop in inner.get("properties", {}).items():
        rows += _answer_rows(f"{name}{suffix}.{sub}", subprop, doc)
    return rows


def markdown(doc: dict | None = None) -> str:
    """The HTTP reference page, in MyST Markdown, of the OpenAPI document ``doc`` (by
    default the service's, for integer ids and the default limits)."""
    from sklearn_micro import __version__
    from sklearn_micro.serving.openapi import document
    from sklearn_micro.serving.validation import Limits

    limits = Limits()
    if doc is None:
        doc = document("int", "int", limits, __version__)
    limit_text = ", ".join(f"`{name}` {value:,}" for name, value in vars(limits).items()
                           if isinstance(value, int))
    common = _common_answers(doc)
    lines = [INTRO.format(limits=limit_text)]
    lines += ["| status | meaning | body |", "|---|---|---|"]
    lines += [_answer_row(status, answer, doc) for status, answer in common] + [""]
    lines += ["| endpoint | what it does |", "|---|---|"]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            lines.append(f"| [`{method.upper()} {path}`](#{_anchor(method, path)}) "
                         f"| {_cell(op.get('summary', ''))} |")
    lines.append("| `GET /openapi.json` | this document, with the served model's id kinds |")
    lines.append("")
    shown = set()
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            lines += [f"({_anchor(method, path)})=", f"## `{method.upper()} {path}`", "",
                      op.get("summary", "").capitalize() + ".", ""]
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                request = _resolve(body["schema"], doc)
                extra = ("" if request.get("additionalProperties", True)
                         else " A field not listed is refused (422).")
                lines += [f"Request body ({_type(body['schema'], doc)}).{extra}", ""]
                lines += _fields(body["schema"], doc, request=True) + [""]
            lines += ["| status | meaning | body |", "|---|---|---|"]
            answers = []
            for status, answer in op.get("responses", {}).items():
                if (status, answer) in common:
                    continue
                content = answer.get("content", {})
                if "application/json" in content:
                    answers.append(content["application/json"]["schema"])
                lines.append(_answer_row(status, answer, doc))
            lines.append("")
            for schema in answers:
                name = schema.get("$ref", "").rsplit("/", 1)[-1]
                if name in shown or name == "Error" or not name:
                    continue
                shown.add(name)
                resolved = _resolve(schema, doc)
                description = resolved.get("description")
                lines += [f"Answer `{name}`" + (f": {description}." if description else "."),
                          ""]
                lines += _fields(schema, doc, request=False) + [""]
    return "\n".join(lines).rstrip() + "\n"


def _common_answers(doc: dict) -> list[tuple[str, dict]]:
    """The error answers every ``POST`` gives alike, listed once on the page."""
    posts = [methods["post"]["responses"] for methods in doc["paths"].values()
             if "post" in methods]
    if not posts:
        return []
    return [(status, answer) for status, answer in posts[0].items()
            if not status.startswith("2") and all(r.get(status) == answer for r in posts)]


def _answer_row(status: str, answer: dict, doc: dict) -> str:
    """A row of an endpoint's answers: its status, what it means and its body's type."""
    content = answer.get("content", {})
    if "application/json" in content:
        body_text = _type(content["application/json"]["schema"], doc)
    else:
        body_text = ", ".join(content) or "none"
    return f"| {status} | {_cell(answer.get('description', ''))} | {_cell(body_text)} |"


def _anchor(method: str, path: str) -> str:
    return "http-" + method + "-" + path.strip("/").replace("/", "-")


def write(app) -> None:
    target = Path(app.srcdir) / "_generated" / "http.md"
    text = markdown()
    if not target.is_file() or target.read_text() != text:  # unchanged: no rebuild
        target.parent.mkdir(exist_ok=True)
        target.write_text(text)


def setup(app):
    app.connect("builder-inited", write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
