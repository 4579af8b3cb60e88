"""``/chat``'s HTML, script and stylesheet, served from package data (no build step).

The page holds no data; everything comes from ``/api/chat/...`` with the caller's token, kept in
``sessionStorage`` under the same key as ``/connect`` (signing in on one signs in on the other, in that
tab). The same strict headers as ``/connect``: scripts and styles from this origin only, no framing.
"""

from __future__ import annotations

import html
from functools import lru_cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import HTMLResponse

from connections.web import SECURITY_HEADERS

ASSETS = {"chat.js": "text/javascript; charset=utf-8", "chat.css": "text/css; charset=utf-8"}


@lru_cache(maxsize=4)
def _asset(name: str) -> str:
    return resources.files("bot.webchat").joinpath("static", name).read_text(encoding="utf-8")


def add_routes(router: APIRouter, auth_mode: str) -> None:
    body = _asset("chat.html").replace("__AUTH_MODE__", html.escape(auth_mode, quote=True))

    @router.get("/chat", response_class=HTMLResponse, include_in_schema=False)
    async def chat_page() -> HTMLResponse:
        return HTMLResponse(body, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})

    @router.get("/chat/assets/{name}", include_in_schema=False)
    async def chat_asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise HTTPException(404, detail="no such asset")
        return Response(_asset(name), media_type=media_type, headers=SECURITY_HEADERS)
