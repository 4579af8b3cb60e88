"""What happens to one verified delivery: record it, fan it out, record the outcome.

The route and the retry loop share this, so a retried delivery goes through exactly the same steps as
a fresh one. Storing happens before anything is acknowledged; a fan-out failure leaves the delivery
``failed`` (GitHub sees a 5xx) and ``switchboard webhooks retry`` can run it again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from channels.errors import Backpressure
from channels.types import InboundMessage
from config.channels.github import GitHubConfig
from webhooks.dispatch import DispatchResult, Firing, plan, publish
from webhooks.events import GitHubEvent, parse_event
from webhooks.payload import Payload
from webhooks.store import DONE, FAILED, RECEIVED, Delivery, DeliveryStore

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30


@dataclass(slots=True)
class Outcome:
    """An HTTP status plus the response body of the contract shape."""

    status: int
    body: dict[str, Any]
    retry_after: int | None = None


def response_body(
    event: str,
    delivery: str,
    *,
    handled: bool,
    duplicate: bool = False,
    result: DispatchResult | dict[str, Any] | None = None,
    ok: bool = True,
    error: str | None = None,
) -> dict[str, Any]:
    if isinstance(result, DispatchResult):
        dispatch_json = result.to_json()
    else:
        dispatch_json = result or DispatchResult().to_json()
    body: dict[str, Any] = {
        "ok": ok,
        "event": event,
        "delivery": delivery,
        "handled": handled,
        "duplicate": duplicate,
        "dispatch": dispatch_json,
    }
    if error:
        body["error"] = error
    return body


class DeliveryProcessor:
    def __init__(self, config: GitHubConfig, store: DeliveryStore) -> None:
        self.config = config
        self.store = store
        self.channel: Any = None  # webhooks.channel.GitHubChannel once the service started
        #: Called with each message before it is published (the bot uses it to apply an agent's model).
        self.before_publish: Callable[[InboundMessage], Awaitable[None]] | None = None

    @property
    def ready(self) -> bool:
        return self.channel is not None and self.channel.sink is not None

    async def handle(
        self, delivery_id: str, event_name: str, payload: Payload | dict[str, Any], raw: str
    ) -> Outcome:
        if event_name == "ping":
            return Outcome(200, response_body(event_name, delivery_id, handled=True))
        event = parse_event(event_name, payload)
        if event is None:  # not an event we act on, or one without repository/number
            return Outcome(200, response_body(event_name, delivery_id, handled=False))
        agents, result = plan(self.config, event)
        # Nothing to run: store the delivery already finished (one write instead of two), and without
        # its payload. The row is what makes a redelivery a duplicate, and its dispatch says why
        # nothing fired; the payload would only be read to run the delivery again, which a finished
        # delivery never is. Most of a busy repository's deliveries fire nothing, so this keeps the log
        # small (a payload can be 25 MB) and the write GitHub waits on cheap (docs/github.md).
        # A delivery that runs an agent also records its event's identity: the same signed body sent
        # again under another delivery id (a replay) is then a duplicate and runs nothing. One that
        # runs nothing needs no such guard, and its write stays as cheap as before.
        if agents:
            status, stored, kept, identity = RECEIVED, None, raw, event.identity
        else:
            status, stored, kept, identity = DONE, result.to_json(), "", None
        try:
            existing, run = await self.store.claim(
                delivery_id, event_name, event.action, kept, status=status, dispatch=stored, identity=identity
            )
        except Exception as exc:
            log.error("could not record GitHub delivery %s: %s", delivery_id, type(exc).__name__)
            body = response_body(
                event_name, delivery_id, handled=False, ok=False, error="could not record the delivery"
            )
            return Outcome(500, body)
        if not run:
            previous = existing.dispatch if existing is not None else None
            if existing is not None and existing.id != delivery_id:
                log.warning(
                    "GitHub delivery %s repeats the event of delivery %s (%s): a replay; nothing runs",
                    delivery_id,
                    existing.id,
                    identity,
                )
            return Outcome(
                200, response_body(event_name, delivery_id, handled=True, duplicate=True, result=previous)
            )
        if not agents:
            if existing is not None:  # a failed delivery redelivered, and now nothing matches
                await self._finish(delivery_id, DONE, result.to_json())
            return Outcome(200, response_body(event_name, delivery_id, handled=True, result=result))
        return await self._fan_out(delivery_id, event_name, event, agents, result)

    async def _fan_out(
        self,
        delivery_id: str,
        event_name: str,
        event: GitHubEvent,
        agents: list[Firing],
        result: DispatchResult,
    ) -> Outcome:
        sink = self.channel.sink if self.channel is not None else None
        hook = self.before_publish

        async def prepared_sink(message: InboundMessage) -> bool:
            assert sink is not None
            if hook is not None:
                await hook(message)
            return await sink(message)

        try:
            if sink is None:
                raise Backpressure("the GitHub channel is not running")
            await publish(delivery_id, event, agents, result, prepared_sink)
        except Exception as exc:
            retryable = isinstance(exc, Backpressure)
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("GitHub delivery %s failed to fan out: %s", delivery_id, reason)
            await self._finish(delivery_id, FAILED, None, reason)
            body = response_body(
                event_name,
                delivery_id,
                handled=True,
                ok=False,
                error=f"could not queue the delivery: {reason}",
            )
            return Outcome(503 if retryable else 500, body, RETRY_AFTER_SECONDS if retryable else None)
        if not await self._finish(delivery_id, DONE, result.to_json()):
            body = response_body(
                event_name,
                delivery_id,
                handled=True,
                result=result,
                ok=False,
                error="could not record the outcome",
            )
            return Outcome(500, body)
        return Outcome(200, response_body(event_name, delivery_id, handled=True, result=result))

    async def _finish(
        self, delivery_id: str, status: str, dispatch_json: dict[str, Any] | None, error: str | None = None
    ) -> bool:
        try:
            await self.store.finish(delivery_id, status, dispatch_json, error)
            return True
        except Exception as exc:
            log.error("could not update GitHub delivery %s: %s", delivery_id, type(exc).__name__)
            return False

    async def rerun(self, delivery: Delivery) -> Outcome:
        """Run a delivery claimed for retry (status already moved back to ``received``)."""
        try:
            event = parse_event(delivery.event, json.loads(delivery.body))
        except ValueError:
            event = None
        if event is None:
            await self._finish(delivery.id, FAILED, None, "stored delivery cannot be parsed")
            return Outcome(400, response_body(delivery.event, delivery.id, handled=False, ok=False))
        agents, result = plan(self.config, event)
        outcome = await self._fan_out(delivery.id, delivery.event, event, agents, result)
        log.info("retried GitHub delivery %s: HTTP-equivalent %d", delivery.id, outcome.status)
        return outcome

    async def retry_loop(self, interval: float) -> None:
        """Pick up deliveries queued by ``switchboard webhooks retry`` (from any process)."""
        while True:
            try:
                if self.ready:
                    for delivery in await self.store.take_retries():
                        await self.rerun(delivery)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("GitHub retry poll failed")
            await asyncio.sleep(interval)
