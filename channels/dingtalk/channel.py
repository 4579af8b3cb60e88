"""DingTalk (钉钉) robot over dingtalk-stream (Stream mode): no public URL needed.

How the pieces fit:

* **Inbound.** dingtalk-stream's client opens the stream connection (``POST
  /v1.0/gateway/connections/open``, then a websocket) and parses frames; our :class:`_BotHandler`
  (a ``ChatbotHandler``) gets each robot message. The connection is the SDK's own main loop,
  ``DingTalkStreamClient.start()`` (open, websocket, keepalive pings, frame routing and ACKs,
  reconnecting after 10 s). It does blocking HTTP inside that loop, so it runs on a daemon thread with
  its own event loop; it treats a cancellation as a network error and retries, so ``stop()`` cancels
  until it ends (``_halt``). Status comes from two hooks on the client (see :class:`_StreamClient`,
  which also says why the gateway URL is the one thing still set on the SDK's class). Each message is handed to the service loop with
  ``asyncio.run_coroutine_threadsafe(sink(msg), service_loop)`` and the ACK waits for the answer (store,
  then confirm): OK when accepted or a duplicate, a "system exception" (500) status when the bus is full
  or closing (Backpressure), storing fails or takes longer than ``SINK_TIMEOUT``: the delivery counts as
  failed for DingTalk's retry, so nothing is acked-then-dropped. A callback that is never ACKed (the
  service was stopped or killed) is redelivered by DingTalk as well; the inbox dedupes on the msgId.
* **Button presses.** With ``card_actions_key`` the AI cards carry the reply's actions as buttons (see
  ``channels.dingtalk.reply``), the client also subscribes to card callbacks
  (``/v1.0/card/instances/callback``), and :class:`_CardHandler` turns a press into an inbound message
  (:meth:`DingTalkChannel.press_to_inbound`) that goes through the same store-then-ACK path. Without a
  template nothing can carry a button that calls back (ActionCard buttons only open URLs): commands
  are typed.
* **Outbound.** Replies are HTTP calls on the service loop (``channels.dingtalk.api``). The reply mode is
  chosen once, at construction: an AI card streamed in place (with its flowStatus) when
  ``card_template_id`` is set, otherwise markdown through the session webhook with a progress notice for
  long turns (see ``channels.dingtalk.reply``).

Platform figures: pacing and sizes here (about 5000 characters per markdown message, about 20 messages a
minute per group robot so webhook sends are spaced 3 s apart); error codes and token lifetime in
``channels.dingtalk.api``; file sizes in ``channels.dingtalk.reply``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from dataclasses import replace
from typing import Any

import dingtalk_stream
from dingtalk_stream import AckMessage, ChatbotMessage
from dingtalk_stream.card_callback import Card_Callback_Router_Topic

from channels.base import Channel, InboundSink
from channels.dingtalk.api import DingTalkApi
from channels.dingtalk.names import NameBook
from channels.dingtalk.reply import CARD_PREFIX, CardBook, CardTransport, ReplyTarget, WebhookTransport
from channels.errors import Backpressure, ChannelError
from channels.reply import ReplyTransport
from channels.types import InboundFile, InboundMessage, ReplyLimits, Sender
from config.channels.dingtalk import DingTalkConfig

log = logging.getLogger(__name__)

#: Markdown messages are cut at about 5000 characters; stay well below (adaptation adds a few).
TEXT_LIMIT = 4000
#: About 20 messages per minute per group robot → one webhook message every 3 s.
WEBHOOK_SEND_INTERVAL = 3.0
#: AI card streaming updates: about one a second keeps the typing effect smooth and within quota.
CARD_UPDATE_INTERVAL = 1.0
#: How long start() waits for the first stream connection before returning (it keeps trying after).
CONNECT_WAIT = 15.0
#: How long a message's ACK may wait for the inbox commit before it answers "system exception" (500).
#: DingTalk redelivers a callback that got no successful ACK; its docs give no deadline we could verify,
#: so the ACK goes out well inside the few seconds such gateways allow. A commit that lands after this
#: anyway is harmless: the redelivery is deduplicated on the DingTalk msgId.
SINK_TIMEOUT = 2.5
P2P, GROUP = "1", "2"
#: The longest button command accepted from a card callback (ours are a few dozen characters).
MAX_COMMAND = 200
#: How long a press's ACK may wait for the presser's name (a callback carries only the staff id); the
#: rest of ``SINK_TIMEOUT`` is left for storing it. Past this the press goes on with the id.
NAME_LOOKUP_TIMEOUT = 1.0


class _QuietPings(logging.Filter):
    """Drop two SDK log lines that are noise, not news: every gateway ping is logged as an "unknown
    message topic" warning, and ``start()`` logs our own stop (a cancellation, whose text is empty) as
    "[start] network exception, error=" at error level. A real network error has a text and stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno == logging.WARNING and "topic=ping" in message:
            return False
        return message != "[start] network exception, error="


SDK_LOGGER = logging.getLogger("dingtalk_stream.client")
SDK_LOGGER.addFilter(_QuietPings())


_OPEN_LOCK = threading.Lock()
#: How often stop() repeats its cancel while the SDK's loop is still running (see ``_halt``).
HALT_POLL = 0.2


class _StreamClient(dingtalk_stream.DingTalkStreamClient):
    """The SDK client, run by its own ``start()``; we only hook two of its public methods.

    * ``open_connection`` — the SDK reads the gateway URL from the class attribute
      ``DingTalkStreamClient.OPEN_CONNECTION_API``, built from ``DINGTALK_OPENAPI_ENDPOINT`` when the
      module is imported, and names the class explicitly, so neither an instance nor a subclass attribute
      can point one client elsewhere. It is the one part of the SDK we cannot drive through its public
      API: we set the class attribute for the duration of each open, under a lock, so two channels
      pointed at different roots (tests, doctor) never use each other's URL. Production uses the SDK's
      own default. The hook also reports "reconnecting" with the reason when an open fails.
    * ``keepalive`` — ``start()`` launches it the moment the websocket is open, which makes it the only
      point where the SDK tells us the stream is connected; it also watches the socket close.

    Tokens, cards, webhooks and files go through ``channels.dingtalk.api`` instead (see there and
    ``channels.dingtalk.reply`` for why the SDK's helpers cannot carry them).
    """

    def __init__(
        self, credential: dingtalk_stream.Credential, open_url: str, channel: DingTalkChannel
    ) -> None:
        super().__init__(credential, logger=SDK_LOGGER)
        self.open_url = open_url
        self.channel = channel

    def open_connection(self) -> dict[str, Any] | None:
        channel = self.channel
        with _OPEN_LOCK:
            dingtalk_stream.DingTalkStreamClient.OPEN_CONNECTION_API = self.open_url
            connection: dict[str, Any] | None = super().open_connection()
        if not connection or "endpoint" not in connection or "ticket" not in connection:
            channel.status.set(
                "reconnecting", "the gateway refused to open a connection (check client_id/secret)"
            )
            channel._first_attempt.set()
            return None  # start() logs it, waits 10 s and tries again
        return connection

    async def keepalive(self, ws: Any, ping_interval: int = 60) -> None:
        """Connected while the socket is open; "reconnecting" the moment it closes (the SDK's own
        keepalive would notice only at its next ping, up to a minute later)."""
        channel = self.channel
        channel.status.set("connected")
        channel._first_attempt.set()
        pinger = asyncio.create_task(super().keepalive(ws, ping_interval))
        try:
            await ws.wait_closed()
        finally:
            pinger.cancel()
        if not channel._stopping.is_set():
            channel.status.set("reconnecting", "the stream connection closed")


class _BotHandler(dingtalk_stream.ChatbotHandler):
    """Receives ``/v1.0/im/bot/messages/get`` callbacks on the stream thread; its return value is the ACK."""

    def __init__(self, channel: DingTalkChannel) -> None:
        super().__init__()
        self.channel = channel

    async def process(self, callback: dingtalk_stream.CallbackMessage) -> tuple[int, str]:
        return await self.channel._accept(callback.data)


class _CardHandler(dingtalk_stream.CallbackHandler):
    """Receives card callbacks (``/v1.0/card/instances/callback``: a button on one of our AI cards was
    pressed) on the stream thread. The ACK's ``response`` is a card update DingTalk applies at once; ours
    is empty, because what a press changes is decided by the manager and shown by the reply's own edit."""

    def __init__(self, channel: DingTalkChannel) -> None:
        super().__init__()
        self.channel = channel

    async def process(self, callback: dingtalk_stream.CallbackMessage) -> tuple[int, Any]:
        code, _ = await self.channel._accept_press(callback.data, str(callback.headers.message_id or ""))
        return code, {}


async def _halt(task: asyncio.Task[None]) -> None:
    """Stop the SDK's ``start()``: it catches the first cancellation (as a network error) and sleeps
    10 s before reconnecting; a second cancel lands in that sleep, outside its ``try``, and ends it."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=HALT_POLL)


class DingTalkChannel(Channel):
    provider = "dingtalk"
    limits = ReplyLimits(text_limit=TEXT_LIMIT, min_edit_interval=WEBHOOK_SEND_INTERVAL, supports_edit=False)

    def __init__(self, config: DingTalkConfig, *, settings: Any = None) -> None:
        if not config.client_id or not config.client_secret:
            raise ValueError(
                "channels.dingtalk needs client_id and client_secret (the app's AppKey/AppSecret)"
            )
        self.config = config
        self.settings = settings
        self.card_mode = bool(config.card_template_id)
        # The reply mode decides the limits, so they are set per instance before the base class reads them.
        interval = config.edit_interval_seconds
        if self.card_mode:
            self.limits = ReplyLimits(  # type: ignore[misc]
                text_limit=TEXT_LIMIT,
                min_edit_interval=CARD_UPDATE_INTERVAL if interval is None else interval,
                supports_edit=True,
            )
        else:
            self.limits = ReplyLimits(  # type: ignore[misc]
                text_limit=TEXT_LIMIT,
                min_edit_interval=WEBHOOK_SEND_INTERVAL if interval is None else interval,
                supports_edit=False,
            )
        super().__init__()
        self.admins = frozenset(config.admins)
        self.trust = config.trust
        self.api = DingTalkApi(
            config.api_base_url, config.client_id, config.client_secret, config.oapi_base_url
        )
        self._service_loop: asyncio.AbstractEventLoop | None = None
        self._stream_loop: asyncio.AbstractEventLoop | None = None
        self._stream_task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._first_attempt = threading.Event()  # set once the first connect attempt succeeded or failed
        self._stopping = threading.Event()
        self._client: _StreamClient | None = None
        #: Buttons exist only on AI cards whose template declares the button-list variable.
        self.buttons = self.card_mode and bool(config.card_actions_key)
        self.cards = CardBook()
        self.names = NameBook(self.api)

    # --- lifecycle ---------------------------------------------------------------------------------
    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self._service_loop = asyncio.get_running_loop()
        self._stopping.clear()
        self._first_attempt.clear()
        client = _StreamClient(
            dingtalk_stream.Credential(self.config.client_id, self.config.client_secret),
            self.config.api_base_url.rstrip("/") + "/v1.0/gateway/connections/open",
            self,
        )
        client.register_callback_handler(ChatbotMessage.TOPIC, _BotHandler(self))
        if self.buttons:  # subscribing is what makes the gateway push card callbacks to this app
            client.register_callback_handler(Card_Callback_Router_Topic, _CardHandler(self))
        client.pre_start()
        self._client = client
        self.status.set("starting")
        self._thread = threading.Thread(target=self._thread_main, name="dingtalk-stream", daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._first_attempt.wait, CONNECT_WAIT)
        if self.status.state != "connected":
            log.warning("DingTalk stream not connected yet (%s); still trying", self.status.detail)

    async def stop(self) -> None:
        self._stopping.set()
        loop, task = self._stream_loop, self._stream_task
        if loop is not None and task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(_halt(task), loop)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
            self._thread = None
        await self.api.close()
        self.status.set("stopped")

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._stream_loop = loop
        asyncio.set_event_loop(loop)
        try:
            assert self._client is not None
            self._stream_task = loop.create_task(self._client.start())
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._stream_task)
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    # --- inbound -----------------------------------------------------------------------------------
    async def _accept(self, data: dict[str, Any]) -> tuple[int, str]:
        """Runs on the stream thread: normalise, hand to the service loop, and turn the answer into an ACK."""
        try:
            message = self.to_inbound(data)
        except Exception:
            log.exception("could not read a DingTalk robot message")
            return AckMessage.STATUS_BAD_REQUEST, "unreadable message"
        return await self._publish(message)

    async def _accept_press(self, data: dict[str, Any], frame_id: str) -> tuple[int, str]:
        """A card callback, like a robot message: normalised, stored, then acknowledged."""
        try:
            message = self.press_to_inbound(data, frame_id)
        except Exception:
            log.exception("could not read a DingTalk card callback")
            return AckMessage.STATUS_BAD_REQUEST, "unreadable card callback"
        if message is not None and message.sender.name is None:
            message.sender = replace(message.sender, name=await self._name_of(message.sender.id))
        return await self._publish(message)

    async def _name_of(self, staff_id: str) -> str | None:
        """Runs on the stream thread: the person's name (cached, else looked up on the service loop, where
        the HTTP client lives), or None within ``NAME_LOOKUP_TIMEOUT`` (the id is shown instead)."""
        known = self.names.known(staff_id)
        if known is not None or self._service_loop is None:
            return known
        future = asyncio.run_coroutine_threadsafe(self.names.lookup(staff_id), self._service_loop)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), NAME_LOOKUP_TIMEOUT)
        except Exception as exc:  # a slow or failing lookup must not hold up the press
            log.info("no name for DingTalk user %s in time: %s", staff_id, type(exc).__name__)
            return None

    async def _publish(self, message: InboundMessage | None) -> tuple[int, str]:
        """Hand ``message`` to the service loop and wait for the store: the ACK code and text."""
        if message is None:
            return AckMessage.STATUS_OK, "ignored"
        if self._sink is None or self._service_loop is None:
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "not running"
        sink = self._sink

        async def publish() -> bool:
            return await sink(message)

        future = asyncio.run_coroutine_threadsafe(publish(), self._service_loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), SINK_TIMEOUT)
        except Backpressure:
            log.info("bus full: asking DingTalk to redeliver message %s", message.platform_message_id)
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "busy, retry later"
        except TimeoutError:
            log.warning(
                "the inbox did not confirm %s in time; DingTalk will redeliver", message.platform_message_id
            )
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "not stored in time"
        except Exception as exc:
            log.warning("accepting a DingTalk message failed: %s", exc)
            return AckMessage.STATUS_SYSTEM_EXCEPTION, "not accepted"
        return AckMessage.STATUS_OK, "OK"

    def press_to_inbound(self, data: dict[str, Any], frame_id: str) -> InboundMessage | None:
        """Normalise a card callback into a press; ``None`` for a callback that is not one of our buttons.

        The button's callback params carry its ``command`` (the template binds it to the button-list
        item). The conversation is the card's own, as remembered when it was sent, so the press has the
        exact key and privacy of that conversation's messages; a card from before a restart is placed by
        the callback's ``spaceType``/``spaceId`` (``IM_GROUP`` + the group's conversation id; anything
        else is the presser's one-to-one chat, keyed by their staff id like robot messages). The press's
        id is the stream frame's ``messageId``: a redelivery repeats it, a second click is a new callback.
        """
        raw = data.get("content")
        content = json.loads(raw) if isinstance(raw, str) and raw else raw
        private = (content or {}).get("cardPrivateData") if isinstance(content, dict) else None
        params = private.get("params") if isinstance(private, dict) else None
        command = params.get("command") if isinstance(params, dict) else None
        user = str(data.get("userId") or "")
        out_track_id = str(data.get("outTrackId") or "")
        if not isinstance(command, str) or not command.startswith("/") or len(command) > MAX_COMMAND:
            return None
        if not user or not out_track_id or not frame_id:
            return None
        card = self.cards.get(out_track_id)
        if card is not None and card.origin:
            origin = card.origin
            workspace, chat = str(origin["workspace"]), str(origin["chat"])
            private_chat, context = bool(origin["is_private"]), dict(origin["context"])
        else:
            group = data.get("spaceType") == "IM_GROUP" and bool(data.get("spaceId"))
            workspace, private_chat = str(data.get("corpId") or ""), not group
            chat = str(data["spaceId"]) if group else user
            context = {
                "session_webhook": "",
                "session_webhook_expires_ms": None,
                "conversation_type": GROUP if group else P2P,
                "conversation_id": chat if group else "",
                "sender_staff_id": user,
                "robot_code": self.config.client_id,
            }
        return InboundMessage(
            provider=self.provider,
            workspace=workspace,
            chat=chat,
            # A press on our card, inside our organisation; the callback has no name (see _name_of).
            sender=Sender(id=user, name=self.names.known(user), member=True),
            text=command,
            platform_message_id=f"press-{frame_id}",
            is_private=private_chat,
            context=context,
            pressed=f"{CARD_PREFIX}{out_track_id}",
        )

    def to_inbound(self, data: dict[str, Any]) -> InboundMessage | None:
        """Normalise a robot callback's data; ``None`` for what the bot should not answer.

        One-to-one chats (conversationType "1") are one conversation per sender; in groups ("2") only
        messages that @-mention the robot count, one conversation per group.
        """
        msg = ChatbotMessage.from_dict(data)
        kind = str(msg.conversation_type or P2P)
        if kind == GROUP and not msg.is_in_at_list:
            return None
        sender_id = str(msg.sender_staff_id or msg.sender_id or "")
        if not sender_id or not msg.message_id:
            return None
        if msg.chatbot_user_id and msg.sender_id == msg.chatbot_user_id:
            return None  # the robot's own message
        self.names.remember(str(msg.sender_staff_id or ""), msg.sender_nick)
        text, files = self._content(msg, data)
        if not text and not files:
            return None
        chat = str(msg.conversation_id or sender_id) if kind == GROUP else sender_id
        return InboundMessage(
            provider=self.provider,
            workspace=str(msg.chatbot_corp_id or msg.sender_corp_id or ""),
            chat=chat,
            # A robot only hears its own organisation, unless the sender names another corp.
            sender=Sender(
                id=sender_id,
                name=msg.sender_nick,
                member=str(msg.sender_corp_id or msg.chatbot_corp_id or "")
                == str(msg.chatbot_corp_id or msg.sender_corp_id or ""),
            ),
            text=text,
            platform_message_id=str(msg.message_id),
            mentioned=kind == GROUP,
            is_private=kind != GROUP,
            files=files,
            context={
                "session_webhook": msg.session_webhook or "",
                "session_webhook_expires_ms": msg.session_webhook_expired_time,
                "conversation_type": kind,
                "conversation_id": msg.conversation_id or "",
                "sender_staff_id": msg.sender_staff_id or msg.sender_id or "",
                "robot_code": msg.robot_code or self.config.client_id,
            },
        )

    @staticmethod
    def _content(msg: ChatbotMessage, data: dict[str, Any]) -> tuple[str, list[InboundFile]]:
        """Text and attachments of each message type; anything we cannot read yields nothing."""
        kind = msg.message_type
        raw_content = data.get("content")
        content: dict[str, Any] = raw_content if isinstance(raw_content, dict) else {}
        files: list[InboundFile] = []
        text = ""
        if kind == "text" and msg.text is not None:
            text = msg.text.content or ""
        elif kind == "picture":
            code = content.get("downloadCode") or content.get("pictureDownloadCode")
            if code:
                files.append(InboundFile(name="image.png", ref=str(code), mime="image/png"))
        elif kind == "richText":
            parts: list[str] = []
            for item in content.get("richText") or []:
                if not isinstance(item, dict):
                    continue
                if "text" in item:
                    parts.append(str(item["text"]))
                code = item.get("downloadCode") or item.get("pictureDownloadCode")
                if code:
                    files.append(
                        InboundFile(name=f"image-{len(files) + 1}.png", ref=str(code), mime="image/png")
                    )
            text = "\n".join(p for p in parts if p.strip())
        elif kind in ("file", "video", "audio"):
            code = content.get("downloadCode")
            if kind == "audio" and (code or content.get("recognition")):
                # DingTalk recognises speech itself (``recognition``): the service uses that text and
                # does not call its transcriber (docs/voice.md). ``duration`` is in milliseconds.
                duration = content.get("duration")
                recognition = str(content.get("recognition") or "").strip()
                files.append(
                    InboundFile(
                        name=str(content.get("fileName") or "audio.amr"),
                        ref=str(code or ""),
                        mime="audio/amr",
                        audio=True,
                        duration=float(duration) / 1000 if isinstance(duration, int | float) else None,
                        transcript=recognition or None,
                    )
                )
            elif code:
                default = {"file": "file", "video": "video.mp4"}[kind]
                files.append(InboundFile(name=str(content.get("fileName") or default), ref=str(code)))
        return text.strip(), files

    # --- replies -----------------------------------------------------------------------------------
    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        target = ReplyTarget.from_context(message.context, self.config.client_id or "")
        if self.card_mode:
            return CardTransport(
                self.api,
                target,
                self.config.card_template_id or "",
                self.config.card_content_key,
                actions_key=self.config.card_actions_key if self.buttons else None,
                book=self.cards,
                origin={
                    "workspace": message.workspace,
                    "chat": message.chat,
                    "is_private": message.is_private,
                    "context": message.context,
                },
            )
        return WebhookTransport(self.api, target, self.config.progress_notice_after_seconds)

    async def _download(self, file: InboundFile, max_bytes: int) -> bytes:
        limit = min(max_bytes, self.config.max_file_bytes)
        return await self.api.download(file.ref, self.config.client_id or "", file.name, limit)

    async def download(self, file: InboundFile, max_bytes: int) -> bytes:
        """Apply the channel's own cap (``max_file_bytes``) on top of the service-wide one."""
        return await super().download(file, min(max_bytes, self.config.max_file_bytes))

    # --- doctor ------------------------------------------------------------------------------------
    async def check(self) -> str | None:
        """Can we get an access token with these credentials? None when yes, else what is wrong."""
        try:
            await self.api.access_token()
        except ChannelError as exc:
            return f"cannot get a DingTalk access token: {exc}"
        finally:
            await self.api.close()
        return None
