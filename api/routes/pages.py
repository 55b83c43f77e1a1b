"""The pages a browser opens: the dashboard and the API docs. Everything they load is served from here.

The docs are Swagger UI from the package (fastapi-offline ships its files), never a CDN: an operator may
paste the token into that page, so every script it runs is ours, pinned by its content security policy.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import Response

STATIC = resources.files("pulsegraph.api") / "static"
# Swagger UI's bundle, stylesheet and icon, as the fastapi-offline package ships them.
DOCS_ASSETS = resources.files("fastapi_offline") / "static"
DOCS_ASSETS_URL = "/docs-assets"
OPENAPI_URL = "/openapi.json"

router = APIRouter()

INDEX_HTML = (STATIC / "index.html").read_bytes() if (STATIC / "index.html").is_file() else b"<h1>pulsegraph</h1>"
PAGE_HEADERS = {
    # Everything the page needs is served from here: no CDN, no inline script.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def docs_policy(page: bytes) -> str:
    """The docs page's Content-Security-Policy: scripts from here and the page's one inline script, by its hash.
    (Swagger UI sets inline styles, hence style-src 'unsafe-inline': styles run no code.)"""
    inline = re.search(rb"<script>(.*?)</script>", page, re.DOTALL)
    scripts = ["'self'"]
    if inline is not None:
        scripts.append("'sha256-%s'" % base64.b64encode(hashlib.sha256(inline.group(1)).digest()).decode())
    return (f"default-src 'self'; script-src {' '.join(scripts)}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


DOCS_PAGE = bytes(get_swagger_ui_html(
    openapi_url=OPENAPI_URL,
    title="pulsegraph API",
    swagger_js_url=f"{DOCS_ASSETS_URL}/swagger-ui-bundle.js",
    swagger_css_url=f"{DOCS_ASSETS_URL}/swagger-ui.css",
    swagger_favicon_url=f"{DOCS_ASSETS_URL}/favicon.png",
    swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from swagger.io
).body)
DOCS_HEADERS = {**PAGE_HEADERS, "Content-Security-Policy": docs_policy(DOCS_PAGE)}


@router.get("/", include_in_schema=False)
async def dashboard() -> Response:
    return Response(INDEX_HTML, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


@router.get("/docs", include_in_schema=False)
async def docs() -> Response:
    return Response(DOCS_PAGE, media_type="text/html; charset=utf-8", headers=DOCS_HEADERS)
