"""The API's docs page (``GET /docs``): one self-contained HTML page rendered from the
OpenAPI document — no script, style sheet or font from another site (FastAPI's own
page loads Swagger UI from a CDN, blank without the internet). Every text from the
document is HTML-escaped."""

from __future__ import annotations

from html import escape
from typing import Any

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
h1{margin-bottom:.2em}h2{margin-top:2em;border-bottom:1px solid #ccc}
.op{border:1px solid #ddd;border-radius:6px;margin:1em 0;padding:.6em 1em}
.verb{font-weight:bold;padding:.1em .5em;border-radius:4px;color:#fff;margin-right:.5em}
.get{background:#2a7ab0}.post{background:#3a9a50}.put{background:#b07a2a}
.delete{background:#b03a2a}.patch{background:#7a4ab0}
code{background:#f3f3f3;padding:0 .25em;border-radius:3px}
table{border-collapse:collapse;margin:.4em 0}td,th{text-align:left;padding:.15em .8em .15em 0}
th{font-weight:600;color:#555}.lock{color:#a60}
"""


def _type(schema: dict[str, Any]) -> str:
    """A schema's type in a few words: ``string``, ``array of SegmentInfo``..."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f'<a href="#schema-{escape(name)}">{escape(name)}</a>'
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    return escape(kind)


def _text(value: Any) -> str:
    return escape(str(value)) if value else ""


def _operation(path: str, verb: str, op: dict[str, Any]) -> str:
    out = [
        f'<div class="op" id="{escape(verb)}-{escape(path)}">',
        f'<span class="verb {escape(verb)}">{escape(verb.upper())}</span>'
        f"<code>{escape(path)}</code> {_text(op.get('summary'))}",
    ]
    if op.get("security"):
        out.append(' <span class="lock">(needs the bearer token)</span>')
    if op.get("description"):
        out.append(f"<p>{_text(op['description'])}</p>")
    params = op.get("parameters", [])
    if params:
        out.append("<table><tr><th>parameter</th><th>in</th><th>type</th><th></th></tr>")
        for p in params:
            need = "required" if p.get("required") else "optional"
            out.append(
                f"<tr><td><code>{_text(p.get('name'))}</code></td><td>{_text(p.get('in'))}</td>"
                f"<td>{_type(p.get('schema', {}))}</td><td>{need}. "
                f"{_text(p.get('description'))}</td></tr>"
            )
        out.append("</table>")
    body = op.get("requestBody", {}).get("content", {}).get("application/json")
    if body:
        out.append(f"<p>body: {_type(body.get('schema', {}))}</p>")
    out.append("<table><tr><th>status</th><th>answer</th></tr>")
    for code, resp in op.get("responses", {}).items():
        schema = resp.get("content", {}).get("application/json", {}).get("schema")
        shown = f" ({_type(schema)})" if schema else ""
        out.append(
            f"<tr><td>{_text(code)}</td><td>{_text(resp.get('description'))}{shown}</td></tr>"
        )
    out.append("</table></div>")
    return "".join(out)


def _schema(name: str, schema: dict[str, Any]) -> str:
    out = [f'<div class="op" id="schema-{escape(name)}"><b>{escape(name)}</b>']
    if schema.get("description"):
        out.append(f"<p>{_text(schema['description'])}</p>")
    props = schema.get("properties", {})
    if props:
        required = set(schema.get("required", []))
        out.append("<table><tr><th>field</th><th>type</th><th></th></tr>")
        for field, sub in props.items():
            need = "required" if field in required else "optional"
            out.append(
                f"<tr><td><code>{escape(field)}</code></td><td>{_type(sub)}</td>"
                f"<td>{need}. {_text(sub.get('description'))}</td></tr>"
            )
        out.append("</table>")
    elif "enum" in schema:
        out.append(f"<p>one of {', '.join(f'<code>{_text(v)}</code>' for v in schema['enum'])}</p>")
    out.append("</div>")
    return "".join(out)


def docs_page(spec: dict[str, Any]) -> str:
    """The HTML page documenting ``spec`` (an OpenAPI document)."""
    info = spec.get("info", {})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{_text(info.get('title'))} API</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_text(info.get('title'))} API <small>{_text(info.get('version'))}</small></h1>",
        f"<p>{_text(info.get('description'))}</p>",
        '<p>The machine-readable document: <a href="openapi.json">openapi.json</a>.</p>',
        "<h2>Endpoints</h2>",
    ]
    for path, verbs in spec.get("paths", {}).items():
        for verb, op in verbs.items():
            parts.append(_operation(str(path), str(verb), op))
    parts.append("<h2>Schemas</h2>")
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        parts.append(_schema(str(name), schema))
    parts.append("</body></html>")
    return "\n".join(parts)
