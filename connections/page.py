"""The ``/connect`` page: one HTML file plus a small script and stylesheet (:class:`~connections.web.StaticPage`).

No build step: the files ship as package data next to this module. The page is public (it holds no
data); it calls the same REST API as any client, so in ``auth.mode: jwt`` it asks for a token once and
keeps it in ``sessionStorage`` (gone when the tab closes).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from config.schema import Settings
from connections.web import StaticPage

CONNECT = StaticPage("connections", "connect.html", "/connect", ("connect.js", "connect.css"))


def add_routes(router: APIRouter, settings: Settings) -> None:
    @router.get("/connect", response_class=HTMLResponse, include_in_schema=False)
    async def connect_page() -> HTMLResponse:
        return CONNECT.render(settings.auth.mode)

    CONNECT.add_asset_route(router)
