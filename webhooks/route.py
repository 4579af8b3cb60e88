"""``POST /api/webhooks/github``: verify, bound, parse, then hand to the :class:`DeliveryProcessor`.

Order matters: the size cap and the signature are checked on the raw bytes before any parsing, so an
unauthenticated caller can make us do no more than read (a bounded amount) and hash.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from config.channels.github import GitHubConfig
from webhooks.processor import DeliveryProcessor
from webhooks.signature import signature_problem

log = logging.getLogger(__name__)

_loads: Callable[[bytes], Any]
_dumps: Callable[[Any], bytes]
try:  # orjson parses a typical 10-25 KB payload several times faster; it ships with langsmith
    from orjson import dumps as _dumps
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - plain json is correct, only slower
    _loads = json.loads

    def _dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()


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


def build_router(config: GitHubConfig, processor: DeliveryProcessor) -> APIRouter:
    router = APIRouter(tags=["github"])

    async def github_webhook(request: Request) -> Response:
        secret = config.webhook_secret
        if not secret and not config.allow_unsigned_webhooks:
            return _error(503, "GitHub webhooks are not configured: set channels.github.webhook_secret")
        body = await read_capped(request, config.max_body_bytes)
        if body is None:
            return _error(
                413, f"payload larger than channels.github.max_body_bytes ({config.max_body_bytes})"
            )
        if secret:
            problem = signature_problem(secret, body, request.headers.get("x-hub-signature-256"))
            if problem:
                log.warning("rejected a GitHub webhook: %s", problem)
                return _error(401, problem)
        event = request.headers.get("x-github-event")
        if not event:
            return _error(400, "missing X-GitHub-Event header")
        delivery = request.headers.get("x-github-delivery", "")
        if not delivery or len(delivery) > MAX_DELIVERY_ID:
            return _error(400, "missing or invalid X-GitHub-Delivery header")
        try:
            text = body.decode("utf-8")
            payload = _loads(body)
        except (UnicodeDecodeError, ValueError):
            return _error(400, "body is not valid JSON", event=event, delivery=delivery)
        if not isinstance(payload, dict):
            return _error(400, "body must be a JSON object", event=event, delivery=delivery)
        if event != "ping" and not processor.ready:
            return _error(503, "the GitHub channel is not running (channels.github.enabled?)", event=event)
        outcome = await processor.handle(delivery, event, payload, text)
        headers = {"Retry-After": str(outcome.retry_after)} if outcome.retry_after else None
        # The same JSON JSONResponse would write, serialised by orjson (a few times cheaper).
        return Response(_dumps(outcome.body), outcome.status, headers, media_type="application/json")

    # Served as a plain Starlette route: FastAPI's per-request dependency and response machinery is about
    # a quarter of this endpoint's CPU (bench/webhooks.py) and it has nothing to validate here. The
    # FastAPI route below is registered after it only so /docs describes the endpoint; it delegates.
    router.add_route(PATH, github_webhook, methods=["POST"], include_in_schema=False)

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
        return await github_webhook(request)

    return router
