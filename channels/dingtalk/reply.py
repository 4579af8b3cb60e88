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
  session webhook (``send(..., fallback=True)``). With a button-list variable in the template
  (``card_actions_key``) the card also shows the reply's actions (Stop, Approve/Deny) as buttons; their
  presses come back as card callbacks on the stream (``channels.dingtalk``).

We send those calls ourselves rather than through ``AICardReplier``: its methods log and swallow every
failure (a refused template, a 429 and a success all return the same), so the reply could neither fall
back to markdown nor honour a rate limit; it reads its URL from the module constant
``DINGTALK_OPENAPI_ENDPOINT`` fixed at import (one root per process, not per channel); and even its
``async_*`` methods fetch the token with blocking ``requests`` on the caller's loop. The status values
are the SDK's own (:class:`AICardStatus`), so the two cannot drift apart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dingtalk_stream.card_replier import AICardStatus

from channels import observe
from channels.dingtalk.api import CardNotDelivered, DingTalkApi, as_edit_failure
from channels.dingtalk.markdown import title_for, to_dingtalk_markdown
from channels.dingtalk.media import Upload, prepare
from channels.errors import ChannelError, EditFailed, FileTooLarge, RetryAfter
from channels.reply import ReplyTransport
from channels.types import Action

log = logging.getLogger(__name__)

MAX_FILE_RETRY_WAIT = 10.0
#: Files over this are not read at all: even zipped they would hardly fit DingTalk's 20 MB.
MAX_FILE_READ = 100 * 1024 * 1024
CARD_PREFIX = "card:"
MARKDOWN_PREFIX = "md:"
PROVIDER = "dingtalk"
#: What the no-template path posts when a reply is still running.
PROGRESS_TEXT = "⏳ Working on it…"
PROCESSING, INPUTING = AICardStatus.PROCESSING.value, AICardStatus.INPUTING.value
#: Not a flowStatus: a card this process did not send, whose state is unknown (after a restart).
UNKNOWN = ""
FINISHED, FAILED = AICardStatus.FINISHED.value, AICardStatus.FAILED.value
#: A button's colour in the card's button list, by :attr:`Action.style` (the template binds it).
BUTTON_COLORS = {"primary": "blue", "danger": "red", None: "gray"}
#: How many AI cards the channel remembers for later edits and presses.
CARD_MEMORY = 2000


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

    async def _send_one_file(self, upload: Upload) -> None:
        """Upload and send one file, waiting once if DingTalk says "too fast" (files are not re-paced).

        A picture is shown as a picture; anything else is a file message (zipped when DingTalk would
        refuse its type, see ``channels.dingtalk.media``).
        """
        for attempt in (1, 2):
            try:
                media_id = await self.api.upload_file(upload.name, upload.data, upload.media_type)
                if upload.media_type == "image":
                    await self.api.send_image_message(self.target.file_target(), media_id)
                else:
                    await self.api.send_file_message(self.target.file_target(), media_id, upload.name)
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
        """Upload each file and send it as a picture or file message; what cannot be sent is listed in
        markdown.

        The session webhook cannot carry files, so this goes through the robot OpenAPI (one-to-one:
        ``oToMessages/batchSend``, group: ``groupMessages/send``).
        """
        unsent: list[tuple[Path, str]] = []
        for path in files:
            try:
                size = path.stat().st_size
                if size > MAX_FILE_READ:  # not worth reading (and zipping) to find out
                    raise FileTooLarge(path.name, size, MAX_FILE_READ)
                data = await asyncio.to_thread(path.read_bytes)
                upload = await asyncio.to_thread(prepare, path.name, data)
                if upload.zipped:
                    log.info("%s is not a type DingTalk accepts; sending it as %s", path.name, upload.name)
                await self._send_one_file(upload)
            except FileTooLarge as exc:
                unsent.append((path, f"{exc.size // (1024 * 1024)} MiB is over DingTalk's 20 MB limit"))
            except (ChannelError, OSError) as exc:
                log.info("sending %s to DingTalk failed: %s", path.name, exc)
                unsent.append((path, "upload failed"))
        if unsent:
            lines = [f"📎 {len(unsent)} file(s) could not be attached:"]
            lines += [f"- {path.name} ({why})" for path, why in unsent]
            await self.post_markdown("\n".join(lines))


def buttons_param(actions: Sequence[Action]) -> str:
    """The card's button-list variable: an object array, sent as a JSON string like every non-string
    card variable (``cardParamMap`` is string to string). ``[]`` shows no buttons."""
    items = [{"label": a.label, "command": a.command, "color": BUTTON_COLORS[a.style]} for a in actions]
    return json.dumps(items, ensure_ascii=False)


@dataclass(slots=True)
class CardState:
    """One AI card as the channel last set it, shared by every transport that touches it.

    ``origin`` is the conversation the card is in (workspace, chat, privacy and the reply context of the
    message it answered), so a button press on it can be keyed exactly like that conversation's messages.
    """

    content: str
    origin: dict[str, Any]
    status: str = PROCESSING
    broken: bool = False
    buttons: tuple[Action, ...] | None = ()  # None: unknown (a card from before a restart)
    #: False for a card restored from a reply's stored state whose text this process has not set: it
    #: is finished by its flowStatus alone, so its text is never overwritten with an unknown one.
    content_known: bool = True


class CardBook:
    """The AI cards this channel sent recently (the newest ``limit``), by outTrackId.

    Each reply has its own transport, but a card outlives its reply: an approval request is edited with
    its outcome by a later reply, and a press names only the card. Kept in memory: after a restart a card
    is unknown (see :meth:`CardTransport.edit` and ``DingTalkChannel.press_to_inbound``).
    """

    def __init__(self, limit: int = CARD_MEMORY) -> None:
        self.limit = limit
        self._cards: OrderedDict[str, CardState] = OrderedDict()

    def get(self, out_track_id: str) -> CardState | None:
        return self._cards.get(out_track_id)

    def add(self, out_track_id: str, card: CardState) -> CardState:
        self._cards[out_track_id] = card
        while len(self._cards) > self.limit:
            self._cards.popitem(last=False)
        return card


class CardTransport(WebhookTransport):
    """An AI card streamed in place; markdown through the webhook as the fallback.

    With ``actions_key`` (the template's button-list variable) the card carries the reply's actions as
    buttons: set with the card's other variables (``PUT /v1.0/card/instances``, by key) only when they
    change, ``[]`` to remove them. The live message is this card on the edit path (no native stream).
    """

    def __init__(
        self,
        api: DingTalkApi,
        target: ReplyTarget,
        template_id: str,
        content_key: str,
        *,
        actions_key: str | None = None,
        book: CardBook | None = None,
        origin: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(api, target)
        self.template_id = template_id
        self.content_key = content_key
        self.actions_key = actions_key
        self.supports_actions = actions_key is not None
        self.book = book if book is not None else CardBook()
        self.origin = origin or {}
        self._mine: list[str] = []  # the cards this reply created or edited (finished() settles them)
        self._undelivered: str | None = None  # why this reply's last card reached nobody

    def _buttons(self, actions: tuple[Action, ...]) -> dict[str, str]:
        return {self.actions_key: buttons_param(actions)} if self.actions_key else {}

    def resume_state(self) -> str:
        """This reply's cards and their flowStatus: after a restart each is continued (and its stream
        ended) from where it was, and none is left reading "processing"."""
        cards = {}
        for out_track_id in self._mine:
            card = self.book.get(out_track_id)
            if card is not None and card.status != UNKNOWN:
                cards[out_track_id] = card.status
        return json.dumps({"cards": cards}, separators=(",", ":")) if cards else ""

    def restore(self, state: str) -> None:
        try:
            cards = json.loads(state)["cards"]
            restored = {str(k): str(v) for k, v in cards.items()}
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("ignoring a stored DingTalk card state that does not parse (%s)", exc)
            return
        for out_track_id, status in restored.items():
            if status not in (PROCESSING, INPUTING, FINISHED, FAILED):
                continue
            if self.book.get(out_track_id) is None:
                origin = dict(self.origin)
                self.book.add(
                    out_track_id, CardState("", origin, status=status, buttons=None, content_known=False)
                )
            if out_track_id not in self._mine:
                self._mine.append(out_track_id)

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        if fallback:
            return await self.post_markdown(text)
        if self._undelivered is not None:
            # Another card would be created only to reach nobody again: fail at once, so the final
            # text goes out as markdown (``fallback``) without a card per intermediate update.
            raise EditFailed(self._undelivered)
        content = to_dingtalk_markdown(text)
        buttons = tuple(actions) if self.supports_actions else ()
        try:
            out_track_id = await self.api.create_and_deliver_card(
                self.template_id,
                {self.content_key: content, "flowStatus": PROCESSING, **self._buttons(buttons)},
                self.target.card_delivery(),
            )
        except CardNotDelivered as exc:
            # Created but shown nowhere (HTTP 200, failure per space): say so, and let the reply fall
            # back to markdown through the robot message path instead of streaming into nothing.
            log.warning("%s; the answer goes as a markdown message instead", exc)
            self._undelivered = str(exc)
            raise
        except ChannelError as exc:
            raise as_edit_failure(exc) from None
        self.book.add(out_track_id, CardState(content, dict(self.origin), buttons=buttons))
        self._mine.append(out_track_id)
        return f"{CARD_PREFIX}{out_track_id}"

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if not ref.startswith(CARD_PREFIX):
            raise EditFailed("DingTalk markdown messages cannot be edited")
        out_track_id = ref[len(CARD_PREFIX) :]
        card = self.book.get(out_track_id) or self.book.add(
            out_track_id, CardState("", dict(self.origin), status=UNKNOWN, buttons=None)
        )
        if out_track_id not in self._mine:
            self._mine.append(out_track_id)
        if card.broken:
            raise EditFailed("this AI card already refused an update")
        content = to_dingtalk_markdown(text)
        want = tuple(actions) if self.supports_actions else ()
        changes = self._buttons(want) if want != card.buttons else {}
        try:
            if card.status in (FINISHED, UNKNOWN):
                # A settled card (a notice edited with its outcome) has ended its stream, and a card from
                # before a restart (a resumed reply, a request edited with its outcome) may have: the
                # text is set as a variable, with the buttons, in one update that works either way.
                await self.api.update_card(out_track_id, {self.content_key: content, **changes})
                card.buttons = want
            else:
                if card.status == PROCESSING:
                    await self.api.update_card(out_track_id, {"flowStatus": INPUTING, **changes})
                    card.status, card.buttons = INPUTING, want
                elif changes:
                    await self.api.update_card(out_track_id, changes)
                    card.buttons = want
                await self.api.stream_card(out_track_id, self.content_key, content, finalize=False)
        except ChannelError as exc:
            failure = as_edit_failure(exc)
            card.broken = isinstance(failure, EditFailed)
            raise failure from None
        card.content, card.content_known = content, True

    async def finished(self) -> None:
        """Move this reply's cards to their end state; the text is already shown, so failures are only
        logged.

        A card that streamed is finalised on its streamed variable first (``isFinalize`` ends the typing
        effect), then set FINISHED with its final content; a card that broke is set FAILED (its buttons
        removed), so it does not look like it is still typing above the markdown answer that replaced it.
        A card that was already finished (a notice edited in place) stays as the edit left it; one from
        before a restart is set FINISHED with its content.
        """
        for out_track_id in self._mine:
            card = self.book.get(out_track_id)
            if card is None or card.status in (FINISHED, FAILED):
                continue
            try:
                if card.broken:
                    clear = self._buttons(()) if card.buttons != () else {}
                    await self.api.update_card(out_track_id, {"flowStatus": FAILED, **clear})
                    card.status, card.buttons = FAILED, ()
                    continue
                if not card.content_known:
                    # Restored, and already showing its text (the resumed reply did not need to edit
                    # it): only its status changes; the text it shows is not known here.
                    clear = self._buttons(()) if card.buttons != () else {}
                    await self.api.update_card(out_track_id, {"flowStatus": FINISHED, **clear})
                    card.status, card.buttons = FINISHED, ()
                    continue
                if card.status == INPUTING:
                    await self.api.stream_card(out_track_id, self.content_key, card.content, finalize=True)
                await self.api.update_card(
                    out_track_id, {"flowStatus": FINISHED, self.content_key: card.content}
                )
                card.status = FINISHED
            except ChannelError as exc:
                log.info("finishing an AI card failed (its text is already shown): %s", exc)
