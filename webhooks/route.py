"""``POST /api/webhooks/github``: verify, bound, parse, then hand to the :class:`DeliveryProcessor`.

Order matters: the size cap and the signature are checked on the raw bytes before any parsing, so an
unauthenticated caller can make us do no more than read (a bounded amount) and hash.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from orjson import dumps as _dumps
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from config.channels.github import GitHubConfig
from webhooks.payload import Payload, decode_payload
from webhooks.processor import DeliveryProcessor
from webhooks.signature import signature_problem

log = logging.getLogger(__name__)

PATH = "/api/webhooks/github"
MAX_DELIVERY_ID = 100


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message, **extra}, status_code=status)


def insecure_warning(config: GitHubConfig) -> str | None:
    """The start-up warning for the unsigned dev mode, or None when webhooks are verified."""
    if config.webhook_secret or not config.allow_unsigned_webhooks:
        return None
    return (
        "INSECURE: channels.github.allow_unsigned_webhooks is true and no webhook_secret is set — anyone "
        "who can reach POST /api/webhooks/github can make the agents run. Use this for local testing only."
    )


async def read_capped(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as it exceeds ``limit`` bytes (never buffers more than that)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class GitHubWebhookEndpoint:
    """The endpoint as a plain ASGI app: ``bot/app.py`` serves it ahead of FastAPI's middleware stack.

    A delivery is the busiest request this service answers, and GitHub waits on it. Through FastAPI it
    also paid the middleware stack, the router's matching, the ``Request``/response wrapper and the
    dependency machinery — about a quarter of a delivery's server CPU (bench/webhooks.py), with nothing
    for them to do here. Served directly, it answers exactly what the FastAPI route answered: the same
    Starlette response classes render every answer, and an unexpected exception gets the 500 that
    Starlette's ``ServerErrorMiddleware`` sends and is re-raised to the server, as there.
    """

    def __init__(self, config: GitHubConfig, processor: DeliveryProcessor) -> None:
        self.config = config
        self.processor = processor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await self.respond(scope, receive)
        except ClientDisconnect:
            return  # the sender hung up before the body arrived: nobody to answer
        except Exception:
            await _SERVER_ERROR(scope, receive, send)
            raise
        await response(scope, receive, send)

    async def respond(self, scope: Scope, receive: Receive) -> Response:
        """The answer to one request; the order of the checks is this module's docstring."""
        config = self.config
        secret = config.webhook_secret
        if not secret and not config.allow_unsigned_webhooks:
            return _error(503, "GitHub webhooks are not configured: set channels.github.webhook_secret")
        headers = _headers(scope)
        body = await read_body(receive, headers.get("content-length"), config.max_body_bytes)
        if body is None:
            return _error(
                413, f"payload larger than channels.github.max_body_bytes ({config.max_body_bytes})"
            )
        if secret:
            problem = signature_problem(secret, body, headers.get("x-hub-signature-256"))
            if problem:
                log.warning("rejected a GitHub webhook: %s", problem)
                return _error(401, problem)
        event = headers.get("x-github-event")
        if not event:
            return _error(400, "missing X-GitHub-Event header")
        delivery = headers.get("x-github-delivery", "")
        if not delivery or len(delivery) > MAX_DELIVERY_ID:
            return _error(400, "missing or invalid X-GitHub-Delivery header")
        try:
            text = body.decode("utf-8")
            payload = decode_payload(body)
        except (UnicodeDecodeError, ValueError):
            return _error(400, "body is not valid JSON", event=event, delivery=delivery)
        if not isinstance(payload, Payload | dict):
            return _error(400, "body must be a JSON object", event=event, delivery=delivery)
        processor = self.processor
        if event != "ping" and not processor.ready:
            return _error(503, "the GitHub channel is not running (channels.github.enabled?)", event=event)
        outcome = await processor.handle(delivery, event, payload, text)
        extra = {"Retry-After": str(outcome.retry_after)} if outcome.retry_after else None
        # The same JSON JSONResponse would write, serialised by orjson (a few times cheaper).
        return Response(_dumps(outcome.body), outcome.status, extra, media_type="application/json")


#: What Starlette's ServerErrorMiddleware answers an unhandled exception with (debug off).
_SERVER_ERROR = PlainTextResponse("Internal Server Error", status_code=500)
_WANTED = frozenset({b"content-length", b"x-hub-signature-256", b"x-github-event", b"x-github-delivery"})


def _headers(scope: Scope) -> dict[str, str]:
    """The four request headers this endpoint reads, first occurrence of each, as Starlette's ``Headers``
    decodes them (ASGI servers send names lowercased) — without building the whole mapping."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name in _WANTED:
            found.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return found


async def read_body(receive: Receive, declared: str | None, limit: int) -> bytes | None:
    """The body from ASGI ``receive``, or None as soon as it exceeds ``limit`` (never buffers more).

    Raises :class:`ClientDisconnect` as Starlette's ``Request.stream`` does when the sender hangs up.
    """
    if declared and declared.isdigit() and int(declared) > limit:
        return None
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        body: bytes = message.get("body", b"")  # the usual case: one message holds it all
        return body if len(body) <= limit else None
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
        message = await receive()


class DirectRoute(Route):
    """A POST route whose endpoint is a plain ASGI app that ``bot/app.py`` serves ahead of FastAPI's
    middleware stack and routing (reached through FastAPI's routing it still works, only slower)."""

    def __init__(self, path: str, endpoint: GitHubWebhookEndpoint) -> None:
        super().__init__(path, cast(Any, endpoint), methods=["POST"], include_in_schema=False)
        self.asgi_endpoint = endpoint


def build_router(config: GitHubConfig, processor: DeliveryProcessor) -> APIRouter:
    """The endpoint as a route (served directly by ``bot/app.py``), plus its description for /docs."""
    router = APIRouter(tags=["github"])
    endpoint = GitHubWebhookEndpoint(config, processor)
    # A Starlette route with an ASGI endpoint: no request/response wrapper even when reached through
    # FastAPI's routing (an app that does not serve it directly). The FastAPI route below only
    # describes the endpoint in /docs; the route above always matches first.
    router.routes.append(DirectRoute(PATH, endpoint))

    @router.post(
        PATH,
        summary="Receive a GitHub webhook delivery",
        description=__doc__ or "",
        response_description="{ok, event, delivery, handled, duplicate, dispatch: {matched, fired, skipped}}",
        responses={
            400: {"description": "missing event/delivery header or body is not a JSON object"},
            401: {"description": "missing, malformed or wrong X-Hub-Signature-256"},
            413: {"description": "body larger than channels.github.max_body_bytes"},
            500: {"description": "the delivery could not be recorded or fanned out; retry it"},
            503: {"description": "no webhook secret configured, channel not running, or back-pressure"},
        },
    )
    async def github_webhook_documented(request: Request) -> Response:
        return await endpoint.respond(request.scope, request.receive)

    return router
