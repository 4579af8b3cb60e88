"""Feishu / Lark: events over lark-oapi's websocket long connection, replies as cards that fill in.

A reply streams into a CardKit card entity (:mod:`channels.feishu.stream`) where the app may use CardKit
(``native_streaming``, on by default), and otherwise is a card patched in place.

Two event loops meet here. ``lark.ws.Client.start()`` blocks forever and drives the connection through a
module-level asyncio loop of its own, so it runs on a dedicated daemon thread with a fresh loop installed
as that module's ``loop``. Each ``im.message.receive_v1`` event is handed to the service's loop with
``run_coroutine_threadsafe`` and the SDK callback *waits* for the sink (store, then confirm): when the bus
refuses the message (``Backpressure``), the sink fails or the commit takes longer than ``SINK_TIMEOUT``
(kept inside Feishu's 3 s deadline), the callback raises, the SDK answers the frame with code 500 instead
of 200, and Feishu pushes the event again later; the inbox dedupes on the message id, so a re-push of a
message that was stored after all runs once. Card button presses (``card.action.trigger``) take the same
path and are answered with an empty callback response once stored (:meth:`FeishuChannel.normalise_press`).
Everything else (API calls, downloads, reactions) runs on the service's loop through
:class:`channels.feishu.api.LarkApi`, which never blocks it.

Only one long connection per process: the SDK keeps its loop in a module global.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lark_oapi as lark
from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTriggerResponse

from channels.base import Channel, InboundSink
from channels.errors import BadRequest, ChannelError, FileTooLarge, RetryAfter
from channels.feishu.api import LarkApi, is_image
from channels.feishu.content import ButtonScope, Mention, card_content, parse_content, text_content
from channels.feishu.names import UserNames
from channels.feishu.stream import CardKitStream, CardResume
from channels.reply import NativeStream, ReplyTransport
from channels.types import Action, InboundFile, InboundMessage, ReplyLimits, Sender
from config.channels.feishu import FeishuConfig

log = logging.getLogger(__name__)

#: Characters per card. The PATCH/send body is capped at about 30 KB; the card text is JSON-escaped twice
#: (card JSON inside the request JSON), so a quote costs 4 bytes and a CJK character 3. 6000 keeps even a
#: worst-case reply under about 24 KB.
TEXT_LIMIT = 6000
#: Feishu refuses uploads above these sizes (images 10 MB, files 30 MB).
MAX_IMAGE_UPLOAD = 10 * 1024 * 1024
MAX_FILE_UPLOAD = 30 * 1024 * 1024
#: Feishu wants each long-connection event answered within 3 s ("processed within 3 seconds without an
#: exception"), else it counts the push as failed and pushes the event again (5 s, 5 min, 1 h, 6 h later).
ACK_DEADLINE = 3.0
#: How long the SDK thread waits for the inbox commit before answering 500: inside the deadline, so the
#: answer still counts. If the commit lands later anyway, the re-push is deduplicated by the inbox.
SINK_TIMEOUT = 2.5
CONNECT_WAIT = 15.0


async def _shutdown_ws(client: Any) -> None:
    """Runs on the SDK loop. lark-oapi has no public stop(): cancel its tasks first (so the receive loop
    neither logs the close as an error nor reconnects), close the socket, then end ``start()`` by
    cancelling the forever-sleeping task it runs until complete."""
    client._auto_reconnect = False
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    forever = [t for t in tasks if getattr(t.get_coro(), "__name__", "") == "_select"]
    others = [t for t in tasks if t not in forever]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    conn = getattr(client, "_conn", None)
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()
    for task in forever:
        task.cancel()


class _LongConnection(lark.ws.Client):
    """lark-oapi's long connection, also answering card callbacks that arrive as ``type=card`` frames.

    Feishu's pages say ``card.action.trigger`` comes over the long connection like an event, and
    lark-oapi routes ``type=event`` frames with that event type to ``register_p2_card_action_trigger``
    (its answer goes back base64-encoded in the response frame). Deployments report card callbacks in
    ``type=card`` frames too, which lark-oapi 1.7.x (1.7.5 checked) drops *unanswered* — the user sees
    "something went wrong" (200340) and nothing happens. So a card frame is relabelled an event before
    the SDK reads it: the same dispatcher, the same 3-second answer.
    """

    async def _handle_data_frame(self, frame: Any) -> None:
        for header in frame.headers:
            if header.key == "type" and header.value == "card":
                header.value = "event"
        await super()._handle_data_frame(frame)


class FeishuTransport(ReplyTransport):
    """Answers one inbound message: a card replying to it, streamed (CardKit) or patched as it grows.

    Actions are card buttons; each carries the command and this conversation's scope back on a press.
    """

    supports_actions = True

    def __init__(self, channel: FeishuChannel, message: InboundMessage) -> None:
        self.channel = channel
        self.api = channel.api
        self.message_id = str(message.context.get("message_id") or message.platform_message_id)
        self.chat_id = str(message.context.get("chat_id") or message.chat)
        self.in_thread = bool(message.context.get("in_thread"))
        self.scope: ButtonScope = button_scope(message)
        #: This reply's CardKit card, and the one a restart left (channels/resume.py).
        self.stream: CardKitStream | None = None
        self.stored: CardResume | None = None

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        if fallback:
            return await self._post("text", text_content(text))
        return await self._post("interactive", card_content(text, actions, self.scope))

    def native_stream(self, actions: Sequence[Action] = ()) -> NativeStream | None:
        """The CardKit entity, with the live buttons in it (Feishu delivers presses while it streams)."""
        if not self.channel.config.native_streaming or self.channel.native_refused:
            return None
        if self.stored is not None:
            self.stream = CardKitStream.resumed_from(self.stored, self, self.api, actions, self.scope)
        else:
            self.stream = CardKitStream(self, self.api, actions, self.scope)
        return self.stream

    def resume_state(self) -> str:
        """The CardKit card (id, message, reserved sequence) the reply streams into, if any."""
        card = self.stream.resume() if self.stream is not None else None
        card = card or self.stored
        return card.to_json() if card is not None else ""

    def restore(self, state: str) -> None:
        self.stored = CardResume.from_json(state)

    def refuse_native(self) -> None:
        """CardKit is not allowed for this app: later replies use the edit path without asking again."""
        if not self.channel.native_refused:
            log.warning(
                "feishu refused CardKit (is the cardkit:card:write scope granted?); "
                "replies are cards patched in place from now on"
            )
        self.channel.native_refused = True

    async def post_card_entity(self, content: str) -> str:
        """Send a CardKit card entity (``interactive`` content naming its ``card_id``) as the reply."""
        return await self._post("interactive", content)

    async def _post(self, msg_type: str, content: str) -> str:
        try:
            return await self.api.reply(self.message_id, msg_type, content, in_thread=self.in_thread)
        except BadRequest as exc:
            # The message we answer may have been recalled meanwhile; the chat still deserves the answer.
            log.info("replying to %s failed (%s); posting to the chat instead", self.message_id, exc)
            return await self.api.create(self.chat_id, msg_type, content)

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        await self.api.patch(ref, card_content(text, actions, self.scope))

    async def send_files(self, files: Sequence[Path]) -> None:
        for path in files:
            limit = MAX_IMAGE_UPLOAD if is_image(path) else MAX_FILE_UPLOAD
            try:
                size = await asyncio.to_thread(lambda p=path: p.stat().st_size)  # type: ignore[misc]
                if size > limit:
                    raise BadRequest(
                        f"{size} bytes is over Feishu's {limit // (1024 * 1024)} MB upload limit"
                    )
                msg_type, content = await self._upload_with_retry(path)
                await self._post(msg_type, content)
            except (ChannelError, OSError) as exc:
                log.warning("attaching %s failed: %s", path.name, exc)
                with contextlib.suppress(ChannelError):
                    await self._post("text", text_content(f"📎 I couldn't attach {path.name}."))

    async def _upload_with_retry(self, path: Path) -> tuple[str, str]:
        try:
            return await self.api.upload(path)
        except RetryAfter as exc:  # uploads are not paced by the reply stream; wait once as asked
            await asyncio.sleep(min(exc.retry_after, 10.0))
            return await self.api.upload(path)


def button_scope(message: InboundMessage) -> ButtonScope:
    """What a button on a reply to ``message`` carries back besides its command.

    A ``card.action.trigger`` callback names the chat and the card's message, but not the thread the
    card answers nor whether the chat is 1:1; without them a press would land in another conversation.
    """
    return {
        "topic": message.topic or "",
        "p2p": message.is_private,
        "thread": bool(message.context.get("in_thread")),
    }


class FeishuChannel(Channel):
    provider = "feishu"
    limits = ReplyLimits(text_limit=TEXT_LIMIT, min_edit_interval=0.4)

    def __init__(self, config: FeishuConfig, *, settings: Any = None) -> None:
        if not config.app_id or not config.app_secret:
            raise ValueError("the feishu channel needs app_id and app_secret")
        self.limits = ReplyLimits(text_limit=TEXT_LIMIT, min_edit_interval=config.edit_interval_seconds)  # type: ignore[misc]
        super().__init__()
        self.admins = frozenset(config.admins)
        self.trust = config.trust
        self.config = config
        self.settings = settings
        self.api = LarkApi(config.app_id, config.app_secret, config.domain)
        #: Display names of the people writing and pressing (events name only their open_id).
        self.names = UserNames(self.api)
        self.bot_open_id: str | None = None
        self.bot_name: str | None = None
        #: Set once Feishu refused CardKit for this app (missing scope): replies stop trying it.
        self.native_refused = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ws_loop: asyncio.AbstractEventLoop | None = None
        self._ws_client: Any = None
        self._ws_error: BaseException | None = None
        self._stopping = False
        self._background: set[asyncio.Task[None]] = set()

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        info = await self.api.bot_info()
        self.bot_open_id = info.get("open_id") or None
        self.bot_name = info.get("app_name") or None
        if not self.bot_open_id:
            log.warning("feishu bot info has no open_id: group @mentions cannot be recognised")
        self._thread = threading.Thread(target=self._run_ws, name="feishu-ws", daemon=True)
        self._thread.start()
        if await self._wait_connected(CONNECT_WAIT):
            self.status.set("connected", self.bot_name)
        elif self._ws_error is not None:
            self.status.set("error", f"long connection failed: {self._ws_error}")
        else:
            self.status.set("reconnecting", "long connection not up yet; the SDK keeps retrying")

    async def _wait_connected(self, timeout: float) -> bool:  # noqa: ASYNC109 - a bounded poll of the SDK thread
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            # ws.Client has no "connected" event; its private _conn is set once the socket is open.
            if getattr(self._ws_client, "_conn", None) is not None:
                return True
            if self._thread is None or not self._thread.is_alive():
                return False
            await asyncio.sleep(0.05)
        return False

    def _run_ws(self) -> None:
        """The SDK thread: a private loop, the ws client built on it, then ``start()`` until stopped."""
        import lark_oapi.ws.client as ws_module

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        ws_module.loop = loop  # the SDK schedules everything on this module global
        self._ws_loop = loop
        handler = (
            lark.EventDispatcherHandler.builder("", "")
            .register_p2_im_message_receive_v1(self._on_message_event)
            .register_p2_card_action_trigger(self._on_card_action)
            .build()
        )
        client = _LongConnection(
            self.config.app_id or "",
            self.config.app_secret or "",
            event_handler=handler,
            domain=self.config.domain,
            log_level=lark.LogLevel.WARNING,
        )
        client.on_reconnecting = lambda: self._set_status_threadsafe("reconnecting", "long connection lost")
        client.on_reconnected = lambda: self._set_status_threadsafe("connected", self.bot_name)
        self._ws_client = client
        try:
            client.start()
        except (asyncio.CancelledError, RuntimeError):
            if not self._stopping:
                log.exception("the feishu long connection stopped unexpectedly")
        except Exception as exc:  # e.g. credentials refused: ClientException, no retry
            self._ws_error = exc
            log.error("the feishu long connection failed: %s", exc)
            self._set_status_threadsafe("error", f"long connection failed: {exc}")
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    def _set_status_threadsafe(self, state: str, detail: str | None) -> None:
        if self._loop is not None and not self._loop.is_closed() and not self._stopping:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.status.set, state, detail)

    async def stop(self) -> None:
        self._stopping = True
        client, ws_loop, thread = self._ws_client, self._ws_loop, self._thread
        if client is not None and ws_loop is not None and not ws_loop.is_closed():
            with contextlib.suppress(Exception):
                future = asyncio.run_coroutine_threadsafe(_shutdown_ws(client), ws_loop)
                await asyncio.wait_for(asyncio.wrap_future(future), 5)
        if thread is not None:
            await asyncio.to_thread(thread.join, 10)
            if thread.is_alive():
                log.warning(
                    "the feishu long-connection thread did not stop; it is a daemon and ends with the process"
                )
        for task in list(self._background):
            task.cancel()
        self._thread = self._ws_client = self._ws_loop = None
        self.status.set("stopped")

    # --- inbound ---------------------------------------------------------------------------------
    def _on_card_action(self, data: Any) -> P2CardActionTriggerResponse:
        """Runs on the SDK thread: a button press (``card.action.trigger``), stored before it is answered.

        Feishu wants the answer within 3 s or shows the presser an error; the answer is an empty
        response (no toast, no card: what a press does shows up as the bot's reply or an edited card).
        A press the inbox could not take raises, so the SDK answers 500 instead.
        """
        self._on_message_event(data, press=True)
        return P2CardActionTriggerResponse({})

    def _on_message_event(self, data: Any, *, press: bool = False) -> None:
        """Runs on the SDK thread. Blocks it until the service took the message, so refusal = no ack."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._stopping:
            raise RuntimeError("the service is not accepting feishu events right now")
        future = asyncio.run_coroutine_threadsafe(self._accept(data, press=press), loop)
        try:
            future.result(SINK_TIMEOUT)  # Backpressure and sink errors propagate: the SDK answers 500
        except TimeoutError:
            raise RuntimeError(
                "the inbox did not confirm within Feishu's deadline; it will re-push"
            ) from None

    async def _accept(self, data: Any, *, press: bool = False) -> None:
        try:
            message = self.normalise_press(data) if press else self.normalise(data)
        except Exception:  # a malformed event is acked and dropped: redelivery would not fix it
            log.exception("could not read a feishu %s", "card action" if press else "message event")
            return
        if message is None or self._sink is None:
            return
        if message.sender.name is None:
            # "✅ Approved by …" and "only … can" name the person; the lookup is cached and bounded.
            name = await self.names.lookup(message.sender.id)
            message.sender = dataclasses.replace(message.sender, name=name)
        accepted = await self._sink(message)
        if accepted and not press and self.config.receipt_reaction:
            task = asyncio.create_task(self._react(message.platform_message_id))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _react(self, message_id: str) -> None:
        """The "OK" receipt reaction: best effort, a failure only costs the user a visual cue."""
        try:
            await self.api.react(message_id, self.config.receipt_reaction)
        except ChannelError as exc:
            log.info("receipt reaction failed: %s", exc)

    def normalise(self, data: Any) -> InboundMessage | None:
        """A ``P2ImMessageReceiveV1`` → InboundMessage, or None when the bot should stay silent."""
        event = getattr(data, "event", None)
        message = getattr(event, "message", None)
        sender = getattr(event, "sender", None)
        if message is None or not message.message_id or not message.chat_id:
            return None
        sender_id = getattr(sender, "sender_id", None)
        sender_open_id = getattr(sender_id, "open_id", None) or getattr(sender_id, "user_id", None) or ""
        if getattr(sender, "sender_type", None) == "app" or (
            self.bot_open_id and sender_open_id == self.bot_open_id
        ):
            return None  # the bot's own (or another app's) message
        mentions = [
            Mention(m.key or "", getattr(m.id, "open_id", None), m.name) for m in (message.mentions or [])
        ]
        for mention in mentions:
            if mention.open_id != self.bot_open_id:
                self.names.remember(mention.open_id, mention.name)
        is_private = message.chat_type == "p2p"
        mentioned = bool(self.bot_open_id) and any(m.open_id == self.bot_open_id for m in mentions)
        if not is_private and not mentioned:
            return None
        parsed = parse_content(message.message_type or "", message.content, mentions, self.bot_open_id)
        if parsed is None or (not parsed.text and not parsed.files):
            return None
        header = getattr(data, "header", None)
        workspace = getattr(header, "tenant_key", None) or getattr(sender, "tenant_key", None) or ""
        # Groups: a reply chain (or topic thread) is one conversation; a fresh @bot starts its own chain,
        # whose root is that message — so replies to the bot's answer continue the same conversation.
        topic = None if is_private else (message.root_id or message.thread_id or message.message_id)
        files = [
            InboundFile(
                name=name,
                ref=f"{message.message_id}:{key}:{kind}",
                mime="audio/ogg" if parsed.audio else None,  # Feishu voice messages are Ogg/Opus
                audio=parsed.audio,
                duration=parsed.audio_seconds,
            )
            for key, kind, name in parsed.files
        ]
        return InboundMessage(
            provider=self.provider,
            workspace=workspace,
            chat=message.chat_id,
            topic=topic,
            # Someone from another tenant (an external chat) names their own tenant_key: not a member.
            sender=Sender(
                id=sender_open_id,
                name=None,
                is_bot=False,
                member=(getattr(sender, "tenant_key", None) or workspace) == workspace,
            ),
            text=parsed.text,
            platform_message_id=message.message_id,
            mentioned=mentioned,
            is_private=is_private,
            files=files,
            context={
                "message_id": message.message_id,
                "chat_id": message.chat_id,
                "in_thread": bool(message.thread_id),
            },
        )

    def normalise_press(self, data: Any) -> InboundMessage | None:
        """A ``P2CardActionTrigger`` (a button on one of our cards) → InboundMessage, or None.

        Keyed like the messages of that conversation: workspace = tenant key, chat = the card's chat,
        topic and privacy from the scope the button carries (see :func:`button_scope`). ``pressed`` is
        the card's message id — what the transport's ``send`` (or CardKit ``begin``) returned — and the
        callback's ``event_id`` makes a re-pushed press dedupe in the inbox.
        """
        header = getattr(data, "header", None)
        event = getattr(data, "event", None)
        action = getattr(event, "action", None)
        value = getattr(action, "value", None)
        context = getattr(event, "context", None)
        operator = getattr(event, "operator", None)
        if not isinstance(value, dict) or not isinstance(value.get("command"), str):
            return None  # not one of our buttons (or a stale card from another build)
        message_id = getattr(context, "open_message_id", None)
        chat_id = getattr(context, "open_chat_id", None)
        open_id = getattr(operator, "open_id", None)
        event_id = getattr(header, "event_id", None)
        if not message_id or not chat_id or not open_id or not event_id:
            return None
        private = bool(value.get("p2p"))
        workspace = getattr(header, "tenant_key", None) or getattr(operator, "tenant_key", None) or ""
        return InboundMessage(
            provider=self.provider,
            workspace=workspace,
            chat=chat_id,
            topic=None if private else (str(value.get("topic") or "") or None),
            sender=Sender(
                id=open_id,
                name=None,
                is_bot=False,
                member=(getattr(operator, "tenant_key", None) or workspace) == workspace,
            ),
            text=value["command"],
            platform_message_id=event_id,
            mentioned=True,
            is_private=private,
            context={"message_id": message_id, "chat_id": chat_id, "in_thread": bool(value.get("thread"))},
            pressed=message_id,
        )

    # --- replies, files, policy ------------------------------------------------------------------
    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        return FeishuTransport(self, message)

    def is_allowed(self, message: InboundMessage) -> bool:
        return not self.config.allowed_users or message.sender.id in self.config.allowed_users

    def allow_listed(self, message: InboundMessage) -> bool:
        return message.sender.id in self.config.allowed_users

    async def _download(self, file: InboundFile, max_bytes: int) -> bytes:
        message_id, _, rest = file.ref.partition(":")
        file_key, _, kind = rest.rpartition(":")
        if not message_id or not file_key or kind not in ("image", "file"):
            raise BadRequest(f"not a feishu resource reference: {file.ref!r}")
        data = await self.api.download(message_id, file_key, kind)
        limit = min(max_bytes, self.config.max_file_bytes)  # the channel's own cap applies too
        if len(data) > limit:
            raise FileTooLarge(file.name, len(data), limit)
        return data

    async def check(self) -> str | None:
        """For ``switchboard doctor``: can we obtain a tenant token with these credentials?"""
        self.api.forget_token()  # the SDK caches by app_id alone: ask the platform, not the cache
        try:
            await self.api.tenant_token()
        except ChannelError as exc:
            return f"feishu: {exc}"
        return None
