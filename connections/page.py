"""The ``/connect`` page: one server-rendered HTML file plus a small script and stylesheet.

No build step: the files ship as package data next to this module. The page is public (it holds no
data); it calls the same REST API as any client, so in ``auth.mode: jwt`` it asks for a token once and
keeps it in ``sessionStorage`` (gone when the tab closes).
"""

from __future__ import annotations

import html
from functools import lru_cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import HTMLResponse

from config.schema import Settings

ASSETS = {"connect.js": "text/javascript; charset=utf-8", "connect.css": "text/css; charset=utf-8"}
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
}


@lru_cache(maxsize=8)
def _asset(name: str) -> str:
    return resources.files("connections").joinpath("static", name).read_text(encoding="utf-8")


def render(settings: Settings) -> str:
    return _asset("connect.html").replace("__AUTH_MODE__", html.escape(settings.auth.mode, quote=True))


def add_routes(router: APIRouter, settings: Settings) -> None:
    @router.get("/connect", response_class=HTMLResponse, include_in_schema=False)
    async def connect_page() -> HTMLResponse:
        headers = {**SECURITY_HEADERS, "Cache-Control": "no-store"}
        return HTMLResponse(render(settings), headers=headers)

    @router.get("/connect/assets/{name}", include_in_schema=False)
    async def connect_asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise HTTPException(404, detail="no such asset")
        return Response(_asset(name), media_type=media_type, headers=SECURITY_HEADERS)
