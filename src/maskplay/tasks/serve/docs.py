"""GET /docs: the OpenAPI description as a plain HTML page made here, from the app's own schema. FastAPI's page
loads Swagger UI's JavaScript and CSS from a CDN and is blank offline; this one needs nothing from outside (the
machine-readable schema stays at /openapi.json)."""

from __future__ import annotations

from html import escape
from typing import Any

STYLE = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}code{background:#eee;"
         "padding:0 .2em}h2{margin-top:1.5em;font-size:1.1em}td{padding:.1em .8em .1em 0;vertical-align:top}")


def _type(schema: dict[str, Any], components: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_type(s, components) for s in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(repr(v) for v in schema["enum"])
    if schema.get("type") == "array":
        return f"list[{_type(schema.get('items', {}), components)}]"
    return str(schema.get("type", "any"))


def _fields(ref: str, components: dict[str, Any]) -> str:
    schema = components.get(ref.rsplit("/", 1)[-1], {})
    required = set(schema.get("required", []))
    rows = [f"<tr><td><code>{escape(name)}</code>{' (required)' if name in required else ''}</td>"
            f"<td>{escape(_type(field, components))}</td>"
            f"<td>{escape(repr(field['default'])) if 'default' in field else ''}</td></tr>"
            for name, field in schema.get("properties", {}).items()]
    return f"<table>{''.join(rows)}</table>" if rows else ""


def docs_page(openapi: dict[str, Any]) -> str:
    """The page: each route with its summary and, for a POST, its body's fields (type, default)."""
    components = openapi.get("components", {}).get("schemas", {})
    info = openapi.get("info", {})
    parts = [f"<!doctype html><meta charset='utf-8'><title>{escape(info.get('title', ''))}</title>",
             f"<style>{STYLE}</style><h1>{escape(info.get('title', ''))}</h1>",
             f"<p>{escape(info.get('description', ''))}</p>",
             "<p>The machine-readable schema: <a href='/openapi.json'>/openapi.json</a>. Errors are OpenAI's "
             "error object: <code>{\"error\": {\"message\", \"type\", \"param\", \"code\"}}</code>.</p>"]
    for path, methods in openapi.get("paths", {}).items():
        for method, op in methods.items():
            parts.append(f"<h2><code>{escape(method.upper())} {escape(path)}</code></h2>")
            parts.append(f"<p>{escape(op.get('summary', ''))}</p>")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if "$ref" in body:
                parts.append(_fields(body["$ref"], components))
    return "\n".join(parts) + "\n"
