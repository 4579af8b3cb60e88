"""The two ways Switchboard answers on DingTalk, as :class:`ReplyTransport` implementations.

* :class:`WebhookTransport` — no card template: each chunk is one markdown message POSTed to the session
  webhook that came with the user's message. Markdown messages cannot be edited, so nothing can stream
  (the channel runs it with ``supports_edit=False``); instead :class:`ProgressNotice` posts one "working
  on it" message when a reply is still running after ``progress_notice_after_seconds``, so a long turn
  is not silence until the end.
* :class:`CardTransport` — an AI card created and delivered through the OpenAPI, then streamed in place
  (``PUT /v1.0/card/streaming``, full content each time), driven through the card's ``flowStatus`` the
  way dingtalk-stream's ``AICardReplier`` does: PROCESSING when created, INPUTING (``PUT
  /v1.0/card/instances``) before the first streamed text, FINISHED when the reply is done, FAILED when
  the card broke and the answer went out as markdown instead. A card that cannot be created or updated
  raises :class:`EditFailed`, so the shared ReplyStream falls back to a markdown message through the
  session webhook (``send(..., fallback=True)``).

We send those calls ourselves rather than through ``AICardReplier``: its methods log and swallow every
failure (a refused template, a 429 and a success all return the same), so the reply could neither fall
back to markdown nor honour a rate limit; it reads its URL from the module constant
``DINGTALK_OPENAPI_ENDPOINT`` fixed at import (one root per process, not per channel); and even its
``async_*`` methods fetch the token with blocking ``requests`` on the caller's loop. The status values
are the SDK's own (:class:`AICardStatus`), so the two cannot drift apart.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dingtalk_stream.card_replier import AICardStatus

from channels import observe
from channels.dingtalk_api import DingTalkApi, as_edit_failure
from channels.dingtalk_markdown import title_for, to_dingtalk_markdown
from channels.errors import ChannelError, EditFailed, RetryAfter
from channels.reply import ReplyTransport
from channels.types import Action

log = logging.getLogger(__name__)

#: DingTalk robot media uploads of type "file" are capped at about 20 MB.
FILE_UPLOAD_LIMIT = 20 * 1024 * 1024
MAX_FILE_RETRY_WAIT = 10.0
CARD_PREFIX = "card:"
MARKDOWN_PREFIX = "md:"
PROVIDER = "dingtalk"
#: What the no-template path posts when a reply is still running.
PROGRESS_TEXT = "⏳ Working on it…"
PROCESSING, INPUTING = AICardStatus.PROCESSING.value, AICardStatus.INPUTING.value
FINISHED, FAILED = AICardStatus.FINISHED.value, AICardStatus.FAILED.value


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """Where a reply goes, rebuilt from the JSON-safe ``InboundMessage.context`` the channel stored."""

    session_webhook: str
    session_webhook_expires_ms: int | None
    conversation_type: str
    conversation_id: str
    sender_staff_id: str
    robot_code: str

    @classmethod
    def from_context(cls, context: dict[str, Any], default_robot_code: str) -> ReplyTarget:
        expires = context.get("session_webhook_expires_ms")
        return cls(
            session_webhook=str(context.get("session_webhook") or ""),
            session_webhook_expires_ms=int(expires) if expires else None,
            conversation_type=str(context.get("conversation_type") or "1"),
            conversation_id=str(context.get("conversation_id") or ""),
            sender_staff_id=str(context.get("sender_staff_id") or ""),
            robot_code=str(context.get("robot_code") or default_robot_code),
        )

    def file_target(self) -> dict[str, Any]:
        return {
            "group": self.conversation_type == "2",
            "conversation_id": self.conversation_id,
            "user_id": self.sender_staff_id,
            "robot_code": self.robot_code,
        }

    def card_delivery(self) -> dict[str, Any]:
        """The deliver-API fields that put a card into this conversation (group or one-to-one)."""
        if self.conversation_type == "2":
            return {
                "openSpaceId": f"dtv1.card//IM_GROUP.{self.conversation_id}",
                "imGroupOpenDeliverModel": {"robotCode": self.robot_code},
            }
        return {
            "openSpaceId": f"dtv1.card//IM_ROBOT.{self.sender_staff_id}",
            "imRobotOpenDeliverModel": {"spaceType": "IM_ROBOT"},
        }


class ProgressNotice:
    """The one thing a reply that cannot be edited can show before its end: a "working on it" message.

    Armed when the reply's transport is created (the turn starts); posted ``after`` seconds later unless
    the final text went out first, so a quick answer stays one message. It runs on its own timer rather
    than as the reply's native stream: a native stream is fed by the reply's pump, and every pump tick
    takes a call from the chat's budget (3 s apart here), which made the final text wait up to one more
    interval after the model finished — for every answer, to post at most one message. The notice is
    decoration: failures are logged, never retried, and it is reported as one platform call.
    """

    def __init__(self, transport: WebhookTransport, after: float) -> None:
        self.transport = transport
        self.posted = False
        self._done = False
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # built outside the service loop (e.g. a doctor check): nothing to arm
            self._done = True
            self._handle: asyncio.TimerHandle | None = None
        else:
            self._handle = loop.call_later(after, self._fire)

    def _fire(self) -> None:
        if not self._done:
            self._task = asyncio.get_running_loop().create_task(self._post(), name="dingtalk-progress")

    async def _post(self) -> None:
        async with self._lock:
            if self._done:
                return
            self._done = True
            observe.emit(PROVIDER, observe.CALL)
            try:
                await self.transport.post_markdown(PROGRESS_TEXT)
                self.posted = True
            except ChannelError as exc:
                log.info("the DingTalk progress notice was not posted: %s", exc)
            except Exception:  # decoration must never break a reply
                log.exception("the DingTalk progress notice crashed")

    async def cancel(self) -> None:
        """The reply is ending: no notice after this; one being posted finishes first (stays above)."""
        if self._handle is not None:
            self._handle.cancel()
        async with self._lock:
            self._done = True


class WebhookTransport(ReplyTransport):
    """Markdown messages through the session webhook; cannot edit.

    With ``progress_after`` set, a :class:`ProgressNotice` is armed for this reply.
    """

    def __init__(self, api: DingTalkApi, target: ReplyTarget, progress_after: float | None = None) -> None:
        self.api = api
        self.target = target
        self.progress = None if progress_after is None else ProgressNotice(self, progress_after)

    async def _send_one_file(self, name: str, data: bytes) -> None:
        """Upload and send one file, waiting once if DingTalk says "too fast" (files are not re-paced)."""
        for attempt in (1, 2):
            try:
                media_id = await self.api.upload_file(name, data)
                await self.api.send_file_message(self.target.file_target(), media_id, name)
                return
            except RetryAfter as exc:
                if attempt == 2:
                    raise
                await asyncio.sleep(min(exc.retry_after, MAX_FILE_RETRY_WAIT))

    async def post_markdown(self, text: str) -> str:
        """One markdown message: through the session webhook, or the robot OpenAPI once it expired."""
        title, body = title_for(text), to_dingtalk_markdown(text)
        target = self.target
        if self.api.session_usable(target.session_webhook, target.session_webhook_expires_ms):
            await self.api.post_session(
                target.session_webhook,
                target.session_webhook_expires_ms,
                {"msgtype": "markdown", "markdown": {"title": title, "text": body}},
            )
        else:
            await self.api.send_robot_message(
                target.file_target(), "sampleMarkdown", {"title": title, "text": body}
            )
        return f"{MARKDOWN_PREFIX}{uuid.uuid4().hex[:12]}"

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        if self.progress is not None:
            await self.progress.cancel()
        return await self.post_markdown(text)

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        raise EditFailed("DingTalk markdown messages cannot be edited")

    async def finished(self) -> None:
        if self.progress is not None:
            await self.progress.cancel()

    async def send_files(self, files: Sequence[Path]) -> None:
        """Upload each file and send it as a file message; what cannot be sent is listed in markdown.

        The session webhook cannot carry files, so this goes through the robot OpenAPI (one-to-one:
        ``oToMessages/batchSend``, group: ``groupMessages/send``).
        """
        unsent: list[tuple[Path, str]] = []
        for path in files:
            try:
                size = path.stat().st_size
                if size > FILE_UPLOAD_LIMIT:
                    unsent.append((path, f"{size // (1024 * 1024)} MiB is over DingTalk's file limit"))
                    continue
                data = await asyncio.to_thread(path.read_bytes)
                await self._send_one_file(path.name, data)
            except (ChannelError, OSError) as exc:
                log.info("sending %s to DingTalk failed: %s", path.name, exc)
                unsent.append((path, "upload failed"))
        if unsent:
            lines = [f"📎 {len(unsent)} file(s) could not be attached:"]
            lines += [f"- {path.name} ({why})" for path, why in unsent]
            await self.post_markdown("\n".join(lines))


@dataclass(slots=True)
class _Card:
    content: str
    status: str = PROCESSING
    broken: bool = False


class CardTransport(WebhookTransport):
    """An AI card streamed in place; markdown through the webhook as the fallback."""

    def __init__(self, api: DingTalkApi, target: ReplyTarget, template_id: str, content_key: str) -> None:
        super().__init__(api, target)
        self.template_id = template_id
        self.content_key = content_key
        self._cards: dict[str, _Card] = {}  # outTrackId → what it shows and where its flowStatus is

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        if fallback:
            return await self.post_markdown(text)
        content = to_dingtalk_markdown(text)
        try:
            out_track_id = await self.api.create_and_deliver_card(
                self.template_id,
                {self.content_key: content, "flowStatus": PROCESSING},
                self.target.card_delivery(),
            )
        except ChannelError as exc:
            raise as_edit_failure(exc) from None
        self._cards[out_track_id] = _Card(content)
        return f"{CARD_PREFIX}{out_track_id}"

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if not ref.startswith(CARD_PREFIX):
            raise EditFailed("DingTalk markdown messages cannot be edited")
        out_track_id = ref[len(CARD_PREFIX) :]
        # A card from before a restart (a resumed reply) is treated as still processing.
        card = self._cards.setdefault(out_track_id, _Card(""))
        if card.broken:
            raise EditFailed("this AI card already refused an update")
        content = to_dingtalk_markdown(text)
        try:
            if card.status == PROCESSING:
                await self.api.update_card(out_track_id, {"flowStatus": INPUTING})
                card.status = INPUTING
            await self.api.stream_card(out_track_id, self.content_key, content, finalize=False)
        except ChannelError as exc:
            failure = as_edit_failure(exc)
            card.broken = isinstance(failure, EditFailed)
            raise failure from None
        card.content = content

    async def finished(self) -> None:
        """Move every card to its end state; the text is already shown, so failures are only logged.

        A card that streamed is finalised on its streamed variable first (``isFinalize`` ends the typing
        effect), then set FINISHED with its final content; a card that broke is set FAILED, so it does
        not look like it is still typing above the markdown answer that replaced it.
        """
        for out_track_id, card in self._cards.items():
            try:
                if card.broken:
                    await self.api.update_card(out_track_id, {"flowStatus": FAILED})
                    card.status = FAILED
                    continue
                if card.status == INPUTING:
                    await self.api.stream_card(out_track_id, self.content_key, card.content, finalize=True)
                await self.api.update_card(
                    out_track_id, {"flowStatus": FINISHED, self.content_key: card.content}
                )
                card.status = FINISHED
            except ChannelError as exc:
                log.info("finishing an AI card failed (its text is already shown): %s", exc)
