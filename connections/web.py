"""What every signed-in page of the service shares: who is calling, and how a static page is served.

``/connect`` (a person's own connections) and ``/admin`` (the operator console, in :mod:`bot.console`)
are both a static HTML file plus a script and a stylesheet over a JSON API, with the same sign-in rules
and the same strict headers. They used to carry a copy each; one copy here keeps them from drifting
apart (a fix to the ``Host`` check or the CSP must reach both).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Request, Response, status
from fastapi.responses import HTMLResponse
from pydantic import BaseModel

from config.schema import Settings
from connections.auth import AuthError, Caller, ForeignHost, caller_from_header, check_host

#: Scripts and styles from this origin only, no inline code, no framing, no referrer.
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
}
MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
#: The kit every page loads before its own files (``connections/static``): the signed-in fetch, element
#: building and the status line (``page.js``), the shared look (``page.css``).
KIT_PACKAGE = "connections"
KIT = ("page.js", "page.css")


class ErrorOut(BaseModel):
    detail: str


#: The errors :func:`authenticate` answers with, for a route's ``responses=`` (OpenAPI).
AUTH_ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorOut, "description": "auth.mode none: the Host header names another server"},
    401: {"model": ErrorOut, "description": "not signed in"},
}


def authenticate(settings: Settings, request: Request, authorization: str | None) -> Caller:
    """The caller of one request, or the HTTP error that says why not.

    ``auth.mode: none`` has nobody sign in, so the request must at least be addressed to this machine
    (400 otherwise: a DNS-rebinding page would name its own host); jwt mode needs a valid bearer token
    (401 otherwise).
    """
    auth = settings.auth
    if auth.mode == "none":
        try:
            check_host(request.headers.get("host"), settings.server.public_url)
        except ForeignHost as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=str(exc)) from None
    try:
        return caller_from_header(auth.mode, auth.jwt_secret, authorization)
    except AuthError as exc:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}
        ) from None


@dataclass(frozen=True)
class StaticPage:
    """One page: ``package/static/<html>`` with ``__AUTH_MODE__`` filled in, and its assets under
    ``<path>/assets/<name>`` (only the names listed and the shared :data:`KIT`, so nothing else in the
    package is served)."""

    package: str
    html: str
    path: str
    assets: tuple[str, ...]

    def text(self, name: str) -> str:
        return _read(KIT_PACKAGE if name in KIT else self.package, name)

    def render(self, auth_mode: str) -> HTMLResponse:
        body = self.text(self.html).replace("__AUTH_MODE__", html.escape(auth_mode, quote=True))
        return HTMLResponse(body, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})

    def add_asset_route(self, router: APIRouter) -> None:
        async def asset(name: str) -> Response:
            suffix = name[name.rfind(".") :] if "." in name else ""
            if (name not in self.assets and name not in KIT) or suffix not in MEDIA_TYPES:
                raise HTTPException(status.HTTP_404_NOT_FOUND, detail="no such asset")
            return Response(self.text(name), media_type=MEDIA_TYPES[suffix], headers=SECURITY_HEADERS)

        router.add_api_route(
            f"{self.path}/assets/{{name}}",
            asset,
            methods=["GET"],
            name=f"{self.path.strip('/')} asset",
            include_in_schema=False,
        )


@lru_cache(maxsize=16)
def _read(package: str, name: str) -> str:
    return resources.files(package).joinpath("static", name).read_text(encoding="utf-8")
