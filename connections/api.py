"""The REST API under ``/api/channels`` and the ``/connect`` page (contract in ARCHITECTURE.md).

The router is built per service with :func:`build_router`; a router-level dependency puts the
:class:`ConnectionsApi` on ``request.state`` so the endpoint dependencies below can be plain module-level
``Annotated`` aliases (readable signatures, complete OpenAPI) without a global.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Request, Response, status
from pydantic import BaseModel, Field

from config.schema import Settings
from connections import page
from connections.providers import deep_link, instruction, known_providers, provider_info
from connections.store import Connection, ConnectionStore, TooManyPendingCodes
from connections.web import AUTH_ERRORS, ErrorOut, authenticate

KNOWN_USERS_CACHE = 10_000


@dataclass
class ConnectionsApi:
    """Everything the endpoints need, injected by the bot (this package never imports it)."""

    store: ConnectionStore
    settings: Settings
    #: Providers the service runs a channel for right now.
    live_providers: Callable[[], Iterable[str]]
    #: The name people address the bot by on a provider, from its running channel (None: not known).
    handle: Callable[[str], str | None] = lambda _provider: None
    _known_users: set[str] = field(default_factory=set)

    async def ensure_user(self, user: str) -> None:
        if user in self._known_users:
            return
        await self.store.ensure_user(user)
        if len(self._known_users) >= KNOWN_USERS_CACHE:
            self._known_users.clear()
        self._known_users.add(user)


# --- response models --------------------------------------------------------------------------------
class ProviderOut(BaseModel):
    name: str = Field(description="provider id used in URLs, e.g. telegram")
    title: str = Field(description="display name")
    enabled: bool = Field(description="the server runs this channel")
    configured: bool = Field(description="same as enabled (kept for clients that ask 'is it set up?')")
    connectable: bool = Field(description="a person can bind an account of this platform with a code")
    reason: str | None = Field(None, description="why no code can be made right now, if so")
    connected: bool = Field(description="the caller has at least one active connection here")
    connections: int = Field(description="the caller's active connections on this provider")


class ConnectionOut(BaseModel):
    id: str
    provider: str
    workspace: str
    external_id: str = Field(description="the platform's account id")
    external_name: str | None = Field(None, description="display name seen when the account connected")
    status: str = Field(description="active (revoked connections are not listed)")
    created_at: datetime
    updated_at: datetime


class ConnectCodeOut(BaseModel):
    provider: str
    code: str = Field(description="one-time code (≥ 128 random bits); send it to the bot")
    url: str | None = Field(description="deep link that sends the code (Telegram), else null")
    instruction: str = Field(description="what to do with the code, in words")
    expires_in: int = Field(description="seconds until the code expires")


# --- dependencies -----------------------------------------------------------------------------------
def get_api(request: Request) -> ConnectionsApi:
    return request.state.connections_api


Api = Annotated[ConnectionsApi, Depends(get_api)]


async def get_current_user(
    api: Api,
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> str:
    user = authenticate(api.settings, request, authorization).user
    await api.ensure_user(user)
    return user


CurrentUser = Annotated[str, Depends(get_current_user)]


def get_store(api: Api) -> ConnectionStore:
    return api.store


Store = Annotated[ConnectionStore, Depends(get_store)]


def _when(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def connection_out(c: Connection) -> ConnectionOut:
    return ConnectionOut(
        id=c.id,
        provider=c.provider,
        workspace=c.workspace,
        external_id=c.external_id,
        external_name=c.external_name,
        status=c.status,
        created_at=_when(c.created_at),
        updated_at=_when(c.updated_at),
    )


def build_router(api: ConnectionsApi) -> APIRouter:
    def bind_api(request: Request) -> None:
        request.state.connections_api = api

    router = APIRouter(dependencies=[Depends(bind_api)])

    @router.get(
        "/api/channels/providers",
        response_model=list[ProviderOut],
        tags=["connections"],
        summary="Platforms, whether they can be connected, and the caller's connection status",
        responses=AUTH_ERRORS,
    )
    async def list_providers(api: Api, store: Store, user: CurrentUser) -> list[ProviderOut]:
        live = set(api.live_providers())
        mine = await store.list_connections(user)
        out = []
        for name in known_providers(api.settings, live):
            info = provider_info(api.settings, name, live)
            assert info is not None
            count = sum(1 for c in mine if c.provider == name)
            out.append(
                ProviderOut(
                    name=info.name,
                    title=info.title,
                    enabled=info.enabled,
                    configured=info.enabled,
                    connectable=info.connectable,
                    reason=info.reason,
                    connected=count > 0,
                    connections=count,
                )
            )
        return out

    @router.get(
        "/api/channels/connections",
        response_model=list[ConnectionOut],
        tags=["connections"],
        summary="The caller's active connections",
        responses=AUTH_ERRORS,
    )
    async def list_connections(store: Store, user: CurrentUser) -> list[ConnectionOut]:
        return [connection_out(c) for c in await store.list_connections(user)]

    @router.post(
        "/api/channels/{provider}/connect",
        response_model=ConnectCodeOut,
        tags=["connections"],
        summary="Make a one-time code that binds a platform account to the caller",
        responses={
            **AUTH_ERRORS,
            400: {
                "model": ErrorOut,
                "description": "provider disabled or not connectable; or (auth.mode none) the Host "
                "header names another server",
            },
            404: {"model": ErrorOut, "description": "unknown provider"},
            429: {"model": ErrorOut, "description": "too many unused codes for this provider"},
        },
    )
    async def create_code(provider: str, api: Api, store: Store, user: CurrentUser) -> ConnectCodeOut:
        info = provider_info(api.settings, provider, api.live_providers())
        if info is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"unknown provider {provider!r}")
        if info.reason is not None:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=info.reason)
        try:
            issued = await store.create_code(user, provider)
        except TooManyPendingCodes as exc:
            raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, detail=str(exc)) from None
        return ConnectCodeOut(
            provider=provider,
            code=issued.code,
            url=deep_link(api.settings, provider, issued.code, api.handle(provider)),
            instruction=instruction(api.settings, provider, issued.code, api.handle(provider)),
            expires_in=max(0, int(issued.expires_at - time.time())),
        )

    @router.delete(
        "/api/channels/connections/{connection_id}",
        status_code=status.HTTP_204_NO_CONTENT,
        response_class=Response,
        tags=["connections"],
        summary="Disconnect one of the caller's connections (the platform account becomes unbound)",
        responses={**AUTH_ERRORS, 404: {"model": ErrorOut, "description": "no such connection of yours"}},
    )
    async def delete_connection(connection_id: str, store: Store, user: CurrentUser) -> Response:
        if await store.revoke(user, connection_id) is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail="no such connection")
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    page.add_routes(router, api.settings)
    return router
