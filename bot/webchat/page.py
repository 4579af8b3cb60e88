"""``/chat``'s HTML, script and stylesheet, served from package data (no build step).

The page holds no data; everything comes from ``/api/chat/...`` with the caller's token, kept in
``sessionStorage`` under the same key as ``/connect`` (signing in on one signs in on the other, in that
tab). The same strict headers as ``/connect``: scripts and styles from this origin only, no framing.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from connections.web import StaticPage

CHAT = StaticPage("bot.webchat", "chat.html", "/chat", ("chat.js", "chat.css"))


def add_routes(router: APIRouter, auth_mode: str) -> None:
    @router.get("/chat", response_class=HTMLResponse, include_in_schema=False)
    async def chat_page() -> HTMLResponse:
        return CHAT.render(auth_mode)

    CHAT.add_asset_route(router)
