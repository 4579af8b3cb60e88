"""The FastAPI application: health, the features' routers (connections, webhooks), OpenAPI at /docs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from bot.service import VERSION, Service
from config.schema import Settings


def create_app(settings: Settings, *, service: Service | None = None, **service_kwargs: Any) -> FastAPI:
    service = service or Service(settings, **service_kwargs)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="Switchboard", version=VERSION, lifespan=lifespan)
    app.state.service = service

    @app.get("/health", tags=["service"], summary="Service, database and channel health")
    async def health() -> JSONResponse:
        body = await service.health()
        return JSONResponse(body, status_code=200 if body["database"] == "ok" else 503)

    for feature in service.features:
        for router in feature.routers():
            app.include_router(router)
    return app
