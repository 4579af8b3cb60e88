"""The two ways Switchboard answers on DingTalk, as :class:`ReplyTransport` implementations.

* :class:`WebhookTransport` — final-only: each chunk is one markdown message POSTed to the session
  webhook that came with the user's message. Markdown messages cannot be edited, so the channel runs
  it with ``supports_edit=False`` and the user sees the answer once it is complete.
* :class:`CardTransport` — an AI card created and delivered through the OpenAPI, then streamed in place
  (``PUT /v1.0/card/streaming``, full content each time) and finalised when the reply is finished. A card
  that cannot be created or updated raises :class:`EditFailed`, so the shared ReplyStream falls back to
  a markdown message through the session webhook (``send(..., fallback=True)``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channels.dingtalk_api import DingTalkApi, as_edit_failure
from channels.dingtalk_markdown import title_for, to_dingtalk_markdown
from channels.errors import ChannelError, EditFailed, RetryAfter
from channels.reply import ReplyTransport

log = logging.getLogger(__name__)

#: DingTalk robot media uploads of type "file" are capped at about 20 MB.
FILE_UPLOAD_LIMIT = 20 * 1024 * 1024
MAX_FILE_RETRY_WAIT = 10.0
CARD_PREFIX = "card:"
MARKDOWN_PREFIX = "md:"


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
            "userIdType": 1,
        }


class WebhookTransport(ReplyTransport):
    """Markdown messages through the session webhook; cannot edit."""

    def __init__(self, api: DingTalkApi, target: ReplyTarget) -> None:
        self.api = api
        self.target = target

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

    async def send(self, text: str, *, fallback: bool = False) -> str:
        return await self.post_markdown(text)

    async def edit(self, ref: str, text: str) -> None:
        raise EditFailed("DingTalk markdown messages cannot be edited")

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


class CardTransport(WebhookTransport):
    """An AI card streamed in place; markdown through the webhook as the fallback."""

    def __init__(self, api: DingTalkApi, target: ReplyTarget, template_id: str, content_key: str) -> None:
        super().__init__(api, target)
        self.template_id = template_id
        self.content_key = content_key
        self._cards: dict[str, str] = {}  # outTrackId → last content shown, for finalising

    async def send(self, text: str, *, fallback: bool = False) -> str:
        if fallback:
            return await self.post_markdown(text)
        content = to_dingtalk_markdown(text)
        try:
            out_track_id = await self.api.create_and_deliver_card(
                self.template_id, self.content_key, content, self.target.card_delivery()
            )
        except ChannelError as exc:
            raise as_edit_failure(exc) from None
        self._cards[out_track_id] = content
        return f"{CARD_PREFIX}{out_track_id}"

    async def edit(self, ref: str, text: str) -> None:
        if not ref.startswith(CARD_PREFIX):
            raise EditFailed("DingTalk markdown messages cannot be edited")
        out_track_id = ref[len(CARD_PREFIX) :]
        content = to_dingtalk_markdown(text)
        try:
            await self.api.stream_card(out_track_id, self.content_key, content, finalize=False)
        except ChannelError as exc:
            raise as_edit_failure(exc) from None
        self._cards[out_track_id] = content

    async def finished(self) -> None:
        """End each card's typing state with its final content (already visible; failures only logged)."""
        for out_track_id, content in self._cards.items():
            try:
                await self.api.stream_card(out_track_id, self.content_key, content, finalize=True)
            except ChannelError as exc:
                log.info("finalising an AI card failed (its text is already shown): %s", exc)
