"""MkDocs hooks: the reference pages generated from their sources of truth, at build time.

``<!-- generated: settings -->`` in a page becomes the table of every setting, from
:class:`pulsegraph.settings.Settings` (the flag, its ``PULSEGRAPH_*`` variable, the default, the
help: what ``pulsegraph run --help`` prints); ``<!-- generated: api -->`` becomes the table of
every route, from the app's OpenAPI schema (what ``/openapi.json`` serves). So the reference can
never disagree with the code, and a route or setting added is documented by the build.
"""

from __future__ import annotations

from pydantic_core import PydanticUndefined

SETTINGS = "<!-- generated: settings -->"
API = "<!-- generated: api -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def settings_table() -> str:
    from pulsegraph.settings import Settings  # noqa: PLC0415 - imported when a page asks for it

    rows = ["| flag | environment | default | what it sets |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = "required" if default is PydanticUndefined else ("off" if default is None else f"`{default}`")
        rows.append(f"| `--{name.replace('_', '-')}` | `PULSEGRAPH_{name.upper()}` | {shown} | {_cell(field.description or '')} |")
    return "\n".join(rows)


def api_table() -> str:
    from pulsegraph.api.app import create_app  # noqa: PLC0415
    from pulsegraph.api.store import ResultStore  # noqa: PLC0415

    spec = create_app(ResultStore()).openapi()
    rows = ["| method | path | what it answers | parameters |", "|---|---|---|---|"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            params = ", ".join(f"`{p['name']}`" for p in op.get("parameters", []) if p.get("in") == "query")
            # The first line of the route's docstring where it has one; FastAPI's summary is then only its name.
            what = (op.get("description") or "").strip().splitlines()[0] if op.get("description") else op.get("summary", "")
            rows.append(f"| {method.upper()} | `{path}` | {_cell(what)} | {params} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if SETTINGS in markdown:
        markdown = markdown.replace(SETTINGS, settings_table())
    if API in markdown:
        markdown = markdown.replace(API, api_table())
    return markdown
