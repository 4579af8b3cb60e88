"""``/admin``'s HTML, script and stylesheet, served from package data (no build step).

The page holds no data; everything it shows comes from ``/api/admin/...`` with the caller's token (kept
in ``sessionStorage`` in jwt mode, like ``/connect``). The same strict headers as ``/connect``: scripts
and styles from this origin only, no inline code, no framing.
"""

from __future__ import annotations

import html
from functools import lru_cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import HTMLResponse

from connections.page import SECURITY_HEADERS

ASSETS = {"admin.js": "text/javascript; charset=utf-8", "admin.css": "text/css; charset=utf-8"}


@lru_cache(maxsize=4)
def _asset(name: str) -> str:
    return resources.files("bot.console").joinpath("static", name).read_text(encoding="utf-8")


def page(auth_mode: str) -> HTMLResponse:
    body = _asset("admin.html").replace("__AUTH_MODE__", html.escape(auth_mode, quote=True))
    return HTMLResponse(body, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})


def add_asset_routes(router: APIRouter) -> None:
    @router.get("/admin/assets/{name}", include_in_schema=False)
    async def admin_asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise HTTPException(404, detail="no such asset")
        return Response(_asset(name), media_type=media_type, headers=SECURITY_HEADERS)
