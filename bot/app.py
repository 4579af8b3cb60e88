"""The FastAPI application: health, readiness, metrics, the features' routers, OpenAPI at /docs.

``/docs`` is served from the ``swagger-ui-bundle`` package (no CDN), so it works on a machine without
internet access, and the schema declares a bearer scheme so "Authorize" → "Try it out" works in jwt mode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from types import MappingProxyType
from typing import Annotated, Any

import swagger_ui_bundle
from fastapi import APIRouter, FastAPI, Header
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.engine import make_url
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot import console, metrics, opsmetrics, tracing
from bot.gc_tuning import start_keeper, stop_keeper, tune_gc, untune_gc
from bot.logs import trace_id_var
from bot.service import VERSION, Service
from bot.webchat import api as webchat_api
from config.schema import Settings
from connections.auth import AuthError, user_from_header
from webhooks.route import DirectRoute

log = logging.getLogger("switchboard")

DOCS_ASSETS = "/docs/assets"


def safe_database_url(url: str) -> str:
    """The database URL with its password replaced by ``***`` (safe for logs and summaries)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(unparseable URL)"


def log_startup_summary(service: Service, config_source: str | None) -> None:
    """One line a person can read to know what is running, and one per channel with its state."""
    settings = service.settings
    listen = f"http://{settings.server.host}:{settings.server.port}"
    channels = {name: channel.status.state for name, channel in service.channels.items()}
    channels.update({name: "error" for name in service.channel_errors})
    fields = {
        "version": VERSION,
        "config": config_source or "built-in defaults",
        "database": safe_database_url(settings.database.url),
        "data_dir": str(service.data_dir.resolve()),
        "sandbox": settings.sandbox.mode,
        "auth": settings.auth.mode,
        "agent": service.agent_state,
        "channels": ", ".join(f"{n}={s}" for n, s in channels.items()) or "none",
        "listen": listen,
        "public_url": settings.server.public_url,
        "docs": f"{listen}/docs",
        "metrics": f"{listen}/metrics",
    }
    log.info(
        "switchboard %s started: config %s, database %s, data dir %s, sandbox %s, channels %s; "
        "listening on %s (public %s)",
        VERSION,
        fields["config"],
        fields["database"],
        fields["data_dir"],
        fields["sandbox"],
        fields["channels"],
        listen,
        settings.server.public_url,
        extra={"fields": fields},
    )
    for name, channel in service.channels.items():
        detail = channel.status.detail
        log.info(
            "channel %s: %s%s",
            name,
            channel.status.state,
            f" ({detail})" if detail else "",
            extra={"fields": {"channel": name, "state": channel.status.state}},
        )
    for name, error in service.channel_errors.items():
        log.error(
            "channel %s: error (%s)", name, error, extra={"fields": {"channel": name, "state": "error"}}
        )


def route_path(scope: Scope) -> str:
    """The path Starlette's routing matches: ``path`` without a ``root_path`` prefix the server added."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", ""):
        return path[len(root) :]
    return path


class SwitchboardApp(FastAPI):
    """FastAPI, except that :class:`webhooks.route.DirectRoute` routes (the GitHub webhook, a plain ASGI
    endpoint) are served before FastAPI's middleware stack and routing,
    which cost more than such an endpoint's own work and do nothing for it."""

    direct: Mapping[str, ASGIApp] = MappingProxyType({})

    def include_router_directly(self, router: APIRouter) -> None:
        """``include_router``, and serve the router's marked POST routes ahead of everything else."""
        self.include_router(router)
        direct = dict(self.direct)
        for route in router.routes:
            if isinstance(route, DirectRoute) and not route.param_convertors:
                direct.setdefault(route.path, route.asgi_endpoint)
        self.direct = direct

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        # Every response names its trace (bot/tracing.py); a message the request hands in joins it.
        trace_id = request_trace_id(scope)
        token = trace_id_var.set(trace_id)
        header = (tracing.HEADER.lower().encode(), trace_id.encode())

        async def send_traced(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            if scope["method"] == "POST" and self.direct:
                endpoint = self.direct.get(route_path(scope))
                if endpoint is not None:
                    await endpoint(scope, receive, send_traced)
                    return
            await super().__call__(scope, receive, send_traced)
        finally:
            trace_id_var.reset(token)


def request_trace_id(scope: Scope) -> str:
    """The request's valid ``X-Trace-Id`` (the caller's trace, joined), else a new id."""
    wanted = tracing.HEADER.lower().encode()
    for name, value in scope.get("headers", ()):
        if name == wanted:
            given = tracing.valid_trace_id(value.decode("latin-1"))
            if given is not None:
                return given
    return tracing.new_trace_id()


def create_app(
    settings: Settings,
    *,
    service: Service | None = None,
    config_source: str | None = None,
    on_agent_failed: Callable[[BaseException], None] | None = None,
    **service_kwargs: Any,
) -> FastAPI:
    """The app; its lifespan starts the service.

    With ``on_agent_failed`` (what ``switchboard serve`` passes), HTTP is served as soon as storage,
    channels and webhooks are up, and the agent is built in the background: ``/health`` says
    ``"agent": "starting"`` until it is ready, and a build failure is handed to the callback (serve
    exits with it). Without it the lifespan waits for the whole start, as tests and embedders expect.
    """
    service = service or Service(settings, **service_kwargs)
    keeper: list[asyncio.Task[None]] = []  # the GC keeper, once the service's objects are frozen

    def tune() -> None:
        tune_gc()  # start-up's long-lived objects out of every later collection (bot/gc_tuning.py)
        if not keeper:
            keeper.append(start_keeper(lambda: service.bus.load == 0))

    async def watch_agent(report: Callable[[BaseException], None]) -> None:
        try:
            await service.agent_ready()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            report(exc)
            return
        tune()  # once the agent's long-lived objects exist too

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        watcher: asyncio.Task[None] | None = None
        if on_agent_failed is None:
            await service.start()
            tune()
        else:
            await service.open()
            watcher = asyncio.create_task(watch_agent(on_agent_failed), name="agent-watch")
        log_startup_summary(service, config_source)
        try:
            yield
        finally:
            if watcher is not None:
                watcher.cancel()
            await stop_keeper(keeper[0] if keeper else None)
            await service.stop()
            if keeper:  # an embedding process (tests) goes on: its collector is its own again
                keeper.clear()
                untune_gc()

    app = SwitchboardApp(
        title="Switchboard", version=VERSION, lifespan=lifespan, docs_url=None, redoc_url=None
    )
    app.state.service = service
    # Features' routers first, GitHub's webhook before the others: Starlette tries routes in order, and
    # a burst of deliveries is the busiest path this app serves (bench/webhooks.py).
    for feature in sorted(service.features, key=lambda f: f is not service.github):
        for router in feature.routers():
            app.include_router_directly(router)
    app.include_router(console.build_router(service))  # /admin and /api/admin (bot/console)
    app.include_router(webchat_api.build_router(service))  # /chat and /api/chat (bot/webchat)
    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets")

    @app.get("/health", tags=["service"], summary="Service, database and channel health")
    async def health() -> JSONResponse:
        body = await service.health()
        return JSONResponse(body, status_code=200 if body["database"] == "ok" else 503)

    @app.get("/ready", tags=["service"], summary="Ready: database reachable, channels started, agent ready")
    async def ready() -> JSONResponse:
        # Liveness (/health) answers as soon as the process serves HTTP; a load balancer or rolling
        # upgrade should wait for this instead, which is 503 until start-up has brought channels up.
        # Under `serve` the agent is built after HTTP is up: ready also means it answers messages.
        # Database and agent are real round trips (cached 2 s): 503 while PostgreSQL is away.
        started = service.started_at is not None
        db_problem, agent_problem, disk_problem = await service.readiness() if started else (None, None, None)
        if not started:
            reason = "starting: channels not started yet"
        elif db_problem is not None:
            reason = f"database {db_problem}"
        elif disk_problem is not None:
            reason = f"disk {disk_problem}"
        elif service.agent_state == "starting":
            reason = "starting: the agent is not ready yet"
        elif service.agent_state == "failed":
            reason = "the agent could not be started"
        elif agent_problem is not None:
            reason = f"the agent {agent_problem}"
        else:
            return JSONResponse({"ready": True})
        return JSONResponse({"ready": False, "reason": reason}, status_code=503)

    metrics_need_token = settings.auth.mode == "jwt" and not settings.server.metrics_public

    @app.get(
        "/metrics",
        tags=["service"],
        summary="Prometheus metrics (auth.mode jwt: a bearer token, unless server.metrics_public)",
        response_class=Response,
        responses={401: {"description": "auth.mode jwt: no valid bearer token"}},
    )
    async def prometheus(
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Response:
        # Turn counts, channel names and error rates say how the service is used: in jwt mode they are
        # for token holders (any valid token: a scraper gets one with `switchboard token create`).
        if metrics_need_token:
            try:
                user_from_header(settings.auth.mode, settings.auth.jwt_secret, authorization)
            except AuthError as exc:
                return JSONResponse(
                    {"detail": str(exc)}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
        if service.started_at is not None:
            await service.readiness()  # switchboard_component_up for the database, agent and disk (≤ 2 s old)
        components = {f"channel:{name}": channel.receiving()[0] for name, channel in service.channels.items()}
        await opsmetrics.refresh(service)  # build info, inbox entries by status, channel states
        body = metrics.render(inbox_unfinished=service.bus.load, components=components)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title="Switchboard API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components = schema.setdefault("components", {})
            components.setdefault("securitySchemes", {})["bearer"] = {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "auth.mode: jwt — an HS256 JWT whose sub is the user id "
                "(`switchboard token create --user NAME`). Not needed with auth.mode: none.",
            }
            schema["security"] = [{"bearer": []}, {}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
