"""Slack: a slack-bolt ``AsyncApp`` over Socket Mode, on the async slack-sdk.

What it listens to: ``app_mention`` in channels (the thread under the mention is the conversation, and
later replies in that thread need no new mention when ``message.channels`` is subscribed) and every
``message`` in a DM (one conversation per DM, or per thread when the user replies in a thread).
Slash commands that reach the app (``/switchboard status``, or ``/connect CODE`` from an older manifest)
are treated as the same text typed in chat, because Slack's client swallows a message starting with
``/`` before the bot can see it; they are answered through their ``response_url``
(:mod:`channels.slack.respond`), which works where the bot is not a member.

Buttons (Block Kit ``actions`` on the bot's messages, :mod:`channels.slack.api`) come back as
``interactive`` envelopes with a ``block_actions`` payload; each press becomes an inbound message in the
conversation of the message it was pressed on (:meth:`SlackChannel._on_button`), acknowledged like an
event only after it is stored.

Delivery is at-least-once on Slack's side: an envelope is acknowledged only after the bus has stored the
message (bolt's ``process_before_response``: the ack is sent when the listener returns, and not at all
when it raises). When the bus is full or closing (:class:`Backpressure`) or storing fails, the envelope
is left unacknowledged; Slack counts a delivery not acked within 3 s as failed and sends it again
(``retry_attempt`` 1-3), also to the next connection after a restart. The inbox dedupes redeliveries on
``client_msg_id`` (or the event ``ts``), so a retried event runs once.

The Socket Mode connection is supervised here instead of by the SDK's own auto-reconnect: that one
retries at a fixed interval and does not say what state it is in, while ``/health`` must show
``connected`` / ``reconnecting`` / ``error`` and a dead token should not be hammered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from collections import OrderedDict
from typing import Any
from urllib.parse import urlparse

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import Channel, InboundSink
from channels.errors import Backpressure, BadRequest, Forbidden, NetworkError
from channels.reply import BudgetRegistry, CallKind, RateBudget, ReplyTransport
from channels.slack.api import ACTION_ID_PREFIX, SlackTransport, calling, slack_error
from channels.slack.respond import (
    REDACT_RESPONSE_URLS,
    ResponseUrls,
    SlackEphemeralTransport,
    SlackResponseTransport,
)
from channels.types import InboundFile, InboundMessage, ReplyLimits, Sender
from config.channels.slack import SlackConfig

log = logging.getLogger(__name__)

#: Longest text per Slack message. Slack accepts 40k characters in ``text`` but recommends staying near
#: 4,000 and caps a section block at 3,000; 3,500 Markdown characters keeps every message readable and
#: leaves room for ``&amp;``-style escaping when converted to mrkdwn.
TEXT_LIMIT = 3500
#: Default spacing of chat.postMessage/chat.update per channel (chat.postMessage: about 1/s per channel).
EDIT_INTERVAL = 1.2
#: chat.update is Tier 3: 50+ calls per minute, counted per method per workspace per app — shared by every
#: reply in the workspace. Our bucket: UPDATE_BURST calls at once, then one per UPDATE_INTERVAL, so no
#: 60 s window ever holds more than UPDATE_BURST + 60 / UPDATE_INTERVAL = 49 updates.
UPDATES_PER_MINUTE = 50
UPDATE_BURST = 4
UPDATE_INTERVAL = 60.0 / (UPDATES_PER_MINUTE - UPDATE_BURST - 1)
#: Updates of that burst only a final answer may take: it never queues behind other answers' edits.
UPDATE_FINAL_RESERVE = 1
#: Message subtypes that are a person talking; every other subtype (edits, joins, bot posts) is ignored.
USER_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
#: apps.connections.open / auth.test answers after which retrying is pointless until the config changes.
FATAL_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "not_allowed_token_type"}
)
#: Channel threads remembered for mention-free follow-ups (oldest forgotten first).
MAX_FOLLOWED_THREADS = 5000
CONNECT_TIMEOUT = 20.0
INITIAL_BACKOFF = 1.0


class SlackChannel(Channel):
    provider = "slack"
    limits = ReplyLimits(text_limit=TEXT_LIMIT, min_edit_interval=EDIT_INTERVAL)

    def __init__(self, config: SlackConfig, *, settings: Any) -> None:
        if not config.bot_token or not config.app_token:
            raise ValueError("channels.slack needs bot_token (xoxb-…) and app_token (xapp-…)")
        self.limits = ReplyLimits(text_limit=TEXT_LIMIT, min_edit_interval=config.edit_interval_seconds)  # type: ignore[misc]
        super().__init__()
        self.admins = frozenset(config.admins)
        self.trust = config.trust
        self.config = config
        self.settings = settings
        self.allowed_users = set(config.allowed_users)
        base = config.api_base_url
        self.api_base_url = base if base.endswith("/") else base + "/"
        self.client: AsyncWebClient | None = None
        self.app: AsyncApp | None = None
        self.handler: AsyncSocketModeHandler | None = None
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.team_id: str | None = None
        self.connects = 0
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self._followed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._response_urls = ResponseUrls()
        self._update_budgets = BudgetRegistry(
            UPDATE_INTERVAL, burst=UPDATE_BURST, reserve=UPDATE_FINAL_RESERVE
        )

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self, sink: InboundSink) -> None:
        """Build the bolt app and its Socket Mode client; connect in the background and return."""
        self._sink = sink
        self._stopping = False
        self.client = self._web_client()
        app_log = logging.getLogger("slack_bolt.switchboard")
        if REDACT_RESPONSE_URLS not in app_log.filters:
            app_log.addFilter(REDACT_RESPONSE_URLS)  # Socket Mode logs whole envelopes at DEBUG
        self.app = AsyncApp(
            client=self.client,
            process_before_response=True,  # store the message *before* acking the envelope
            logger=app_log,
        )
        self.app.event("app_mention")(self._on_mention)
        self.app.event("message")(self._on_message)
        self.app.event(re.compile(".*"))(self._on_other_event)  # ack what we do not use: no retries
        self.app.command(re.compile(".*"))(self._on_slash_command)
        self.app.block_action(re.compile("^" + re.escape(ACTION_ID_PREFIX)))(self._on_button)
        self.app.error(self._on_error)
        self.handler = AsyncSocketModeHandler(
            self.app, self.config.app_token, ping_interval=self.config.ping_interval_seconds
        )
        socket = self.handler.client
        socket.default_auto_reconnect_enabled = False  # the supervisor below owns reconnecting
        socket.auto_reconnect_enabled = False
        self.status.set("starting", "connecting to Slack")
        self._supervisor = asyncio.create_task(self._supervise(), name="slack-socket-mode")

    async def stop(self) -> None:
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._supervisor
            self._supervisor = None
        if self.handler is not None:
            with contextlib.suppress(Exception):
                await self.handler.close_async()
            self.handler = None
        self.status.set("stopped")

    def _web_client(self) -> AsyncWebClient:
        return AsyncWebClient(token=self.config.bot_token, base_url=self.api_base_url)

    # --- connection supervision ------------------------------------------------------------------
    async def _supervise(self) -> None:
        """Keep one live Socket Mode session; reconnect with exponential backoff and jitter."""
        assert self.handler is not None
        socket = self.handler.client
        backoff = INITIAL_BACKOFF
        poll = min(0.5, self.config.ping_interval_seconds / 2)
        while not self._stopping:
            if await socket.is_connected():
                if self.status.state != "connected":
                    self.status.set("connected", f"Socket Mode, team {self.team_id or '?'}")
                    log.info("slack: connected (Socket Mode)")
                backoff = INITIAL_BACKOFF
                await asyncio.sleep(poll)
                continue
            if self.status.state == "connected":
                self.status.set("reconnecting", "the Socket Mode connection dropped")
                log.warning("slack: Socket Mode connection lost; reconnecting")
            try:
                await self._connect_once()
                continue
            except asyncio.CancelledError:
                raise
            except SlackApiError as exc:
                code = str(exc.response.get("error"))
                if code in FATAL_ERRORS:
                    self.status.set("error", f"Slack rejected the token ({code}); check bot_token/app_token")
                    backoff = self.config.reconnect_max_seconds
                else:
                    self.status.set("reconnecting", f"Slack answered {code}; retrying in {backoff:.0f}s")
            except Exception as exc:
                detail = str(slack_error("connect", exc))
                self.status.set("reconnecting", f"{detail}; retrying in {backoff:.0f}s")
            log.warning("slack: %s: %s", self.status.state, self.status.detail)
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, self.config.reconnect_max_seconds)

    async def _connect_once(self) -> None:
        assert self.handler is not None and self.client is not None
        socket = self.handler.client
        if self.bot_user_id is None:
            auth = await self.client.auth_test()
            self.bot_user_id, self.bot_id = auth.get("user_id"), auth.get("bot_id")
            self.team_id = auth.get("team_id")
        async with asyncio.timeout(CONNECT_TIMEOUT), socket.connect_operation_lock:
            if await socket.is_connected():
                return  # the SDK itself replaced the connection (Slack's "disconnect" refresh)
            socket.last_ping_pong_time = None  # else a stale timestamp marks the new session dead too
            socket.wss_uri = await socket.issue_new_wss_url()
            await socket.connect()
        self.connects += 1

    # --- inbound ---------------------------------------------------------------------------------
    async def _on_mention(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        message = self._normalise(event, body, mentioned=True)
        if message is not None:
            await self._publish(message)
            if not message.is_private and message.topic:
                self._follow(message.chat, message.topic)

    async def _on_message(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        """DMs always; in channels only replies inside a thread the bot was mentioned in.

        A mention arrives twice when ``message.channels`` is subscribed (as ``app_mention`` and as
        ``message``); both carry the same ``client_msg_id``, so the inbox runs it once.
        """
        if event.get("channel_type") != "im":
            thread = event.get("thread_ts")
            followed = thread and self._following(str(event.get("channel")), str(thread))
            if not (self.config.thread_follow_ups and followed):
                heard = self._normalise(event, body, mentioned=False) if self.overhear else None
                if heard is not None and self.overhear is not None:  # the room window (docs/agents.md)
                    self.overhear(heard)
                return
        message = self._normalise(event, body, mentioned=False)
        if message is not None:
            await self._publish(message)

    def _follow(self, chat: str, thread_ts: str) -> None:
        """Remember a channel thread the bot answers in (bounded; forgotten on restart)."""
        self._followed[(chat, thread_ts)] = None
        self._followed.move_to_end((chat, thread_ts))
        while len(self._followed) > MAX_FOLLOWED_THREADS:
            self._followed.popitem(last=False)

    def _following(self, chat: str, thread_ts: str) -> bool:
        return (chat, thread_ts) in self._followed

    async def _on_other_event(self) -> None:
        """Any other subscribed event: acknowledged (so Slack does not retry it) and ignored."""

    async def _on_slash_command(self, ack: Any, command: dict[str, Any]) -> None:
        """A slash command becomes the same text typed in chat, answered through its ``response_url``.

        ``/switchboard status`` (the manifest's one command, ``slash_command``) is ``/status``; any other
        command of the app (``/connect CODE`` from an older manifest) is taken as typed.
        """
        channel = str(command.get("channel_id") or "")
        user = str(command.get("user_id") or "")
        if not channel or not user:
            await ack()
            return
        name = str(command.get("command") or "")
        text = self._command_text(name, str(command.get("text") or ""))
        context: dict[str, Any] = {"command": name}
        if command.get("response_url"):
            context["response_url"] = str(command["response_url"])  # a secret: never logged
        message = InboundMessage(
            provider=self.provider,
            workspace=str(command.get("team_id") or self.team_id or ""),
            chat=channel,
            topic=None,
            # The payload names the invoking user's workspace: ours, unless a Slack Connect guest's.
            sender=Sender(
                id=user,
                name=command.get("user_name"),
                member=not self.team_id or str(command.get("team_id") or self.team_id) == self.team_id,
            ),
            text=text,
            platform_message_id=f"cmd-{command.get('trigger_id') or text}",
            mentioned=True,
            is_private=channel.startswith("D") or command.get("channel_name") == "directmessage",
            context=context,
        )
        await self._publish(message)  # Backpressure propagates: no ack, Slack shows a failure
        await ack()

    async def _on_button(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A button press (``block_actions``) becomes the button's command typed in that conversation.

        Acknowledged only after the press is stored, like an event; unacknowledged (bus full, storing
        failed) Slack counts the delivery as failed. See :meth:`_press` for how it is keyed.
        """
        message = self._press(body, action)
        if message is not None:
            await self._publish(message)  # Backpressure propagates: no ack
        await ack()

    def _press(self, body: dict[str, Any], action: dict[str, Any]) -> InboundMessage | None:
        """``block_actions`` → InboundMessage with the same conversation key as that thread's messages.

        The conversation comes from the message the button is on (``container``): its channel, and its
        ``thread_ts`` — the bot answers in the thread of the question, so that is the topic events get
        too (in a DM only when the DM is threaded). ``pressed`` is the message's ``ts``, which is what
        :class:`SlackTransport` returned for it. The id is the interaction's ``trigger_id`` (Slack
        makes one per interaction and repeats it when it delivers the same payload again; the
        ``envelope_id`` is new on every delivery), so a redelivered press dedupes in the inbox.
        The ``response_url`` lets a private answer to the press (a refusal) be an ephemeral.
        """
        container = body.get("container") or {}
        source = body.get("message") or {}
        channel = str(container.get("channel_id") or (body.get("channel") or {}).get("id") or "")
        message_ts = str(container.get("message_ts") or source.get("ts") or "")
        user = body.get("user") or {}
        command = str(action.get("value") or "")
        if not channel or not message_ts or not user.get("id") or not command:
            return None
        if container.get("is_ephemeral"):
            return None  # we never put buttons on ephemerals: nothing of ours was pressed
        private = channel.startswith("D") or (body.get("channel") or {}).get("name") == "directmessage"
        thread_ts = container.get("thread_ts") or source.get("thread_ts")
        # In a channel the bot's message always sits in the question's thread; a top-level one (not
        # ours) would be its own thread, as a mention of it would start.
        topic = thread_ts if private else (thread_ts or message_ts)
        press_id = body.get("trigger_id") or f"{user['id']}-{action.get('action_ts') or message_ts}"
        context: dict[str, Any] = {"ts": message_ts, "thread_ts": thread_ts, "command": "a button"}
        if body.get("response_url"):
            context["response_url"] = str(body["response_url"])  # a secret: never logged
        team = body.get("team") or {}
        return InboundMessage(
            provider=self.provider,
            workspace=str(team.get("id") or user.get("team_id") or self.team_id or ""),
            chat=channel,
            topic=str(topic) if topic else None,
            sender=Sender(
                id=str(user["id"]),
                name=user.get("name") or user.get("username"),
                member=str(user.get("team_id") or team.get("id") or "")
                == str(team.get("id") or self.team_id or ""),
            ),
            text=command,
            platform_message_id=f"press-{press_id}",
            is_private=private,
            context=context,
            pressed=message_ts,
        )

    def _command_text(self, name: str, args: str) -> str:
        """``/switchboard`` → ``/help``; ``/switchboard new`` → ``/new``; other commands as typed.

        After ``/switchboard`` a known command name (or anything starting with ``/``, e.g. a skill)
        is the command; other text is a question for the agent, like a DM.
        """
        args = args.strip()
        if name.lower() != self.config.slash_command.lower():
            return f"{name} {args}".strip()
        if not args:
            return "/help"
        if args.startswith("/"):
            return args
        first = args.split(maxsplit=1)[0].lower()
        if first in {c.name.lower() for c in self.commands}:
            return f"/{args}"
        return args

    async def _on_error(self, error: Exception) -> None:
        if isinstance(error, Backpressure):
            log.info("slack: bus full, leaving the envelope unacknowledged so Slack redelivers it")
        else:
            log.error("slack: handling an event failed: %s: %s", type(error).__name__, error)

    async def _publish(self, message: InboundMessage) -> None:
        if self._sink is None:
            raise Backpressure("the Slack channel is not started")
        await self._sink(message)

    def _normalise(
        self, event: dict[str, Any], body: dict[str, Any], *, mentioned: bool
    ) -> InboundMessage | None:
        """One Slack message event → InboundMessage, or None for events that are not a person talking."""
        if event.get("subtype") not in USER_SUBTYPES or event.get("bot_id"):
            return None
        user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
        if not user or not channel or not ts or user == self.bot_user_id:
            return None
        # app_mention events carry no channel_type; DM channel ids start with "D".
        private = event.get("channel_type") == "im" or str(channel).startswith("D")
        thread_ts = event.get("thread_ts")
        # In a channel every mention starts (or continues) a thread; a DM is one conversation.
        topic = thread_ts if private else (thread_ts or ts)
        profile = event.get("user_profile") or {}
        team = str(body.get("team_id") or event.get("team") or self.team_id or "")
        return InboundMessage(
            provider=self.provider,
            workspace=team,
            chat=str(channel),
            topic=str(topic) if topic else None,
            sender=Sender(
                id=str(user),
                name=profile.get("display_name") or profile.get("real_name"),
                # A Slack Connect guest's events name their own team in user_team: not one of ours.
                member=str(event.get("user_team") or team) == team,
            ),
            text=self._strip_mention(str(event.get("text") or "")),
            platform_message_id=str(event.get("client_msg_id") or ts),
            mentioned=mentioned,
            is_private=private,
            files=[f for f in (self._file(item) for item in event.get("files") or []) if f],
            context={"ts": str(ts), "thread_ts": thread_ts},
        )

    def _strip_mention(self, text: str) -> str:
        if self.bot_user_id:
            text = re.sub(rf"^\s*<@{re.escape(self.bot_user_id)}(?:\|[^>]*)?>[\s:,]*", "", text)
        return text.strip()

    @staticmethod
    def _file(item: dict[str, Any]) -> InboundFile | None:
        ref = item.get("url_private_download") or item.get("url_private") or item.get("id")
        if not ref or item.get("mode") == "tombstone":
            return None
        mime = item.get("mimetype")
        # An audio clip recorded in Slack (``subtype: slack_audio``, with ``duration_ms``) or any shared
        # audio file: the service transcribes it (docs/voice.md).
        audio = item.get("subtype") == "slack_audio" or str(mime or "").startswith("audio/")
        duration_ms = item.get("duration_ms")
        return InboundFile(
            name=str(item.get("name") or item.get("title") or item.get("id") or "file"),
            ref=str(ref),
            size=item.get("size"),
            mime=mime,
            audio=audio,
            duration=duration_ms / 1000 if audio and isinstance(duration_ms, int | float) else None,
        )

    # --- policy and replies ----------------------------------------------------------------------
    def is_allowed(self, message: InboundMessage) -> bool:
        return not self.allowed_users or message.sender.id in self.allowed_users

    def allow_listed(self, message: InboundMessage) -> bool:
        return message.sender.id in self.allowed_users

    def shared_budgets(self, message: InboundMessage, kind: CallKind) -> tuple[RateBudget, ...]:
        """Edits (chat.update) also draw on the workspace's bucket; posts are paced per channel only."""
        if kind != "edit":
            return ()
        return (self._update_budgets.for_chat(message.workspace or self.team_id or ""),)

    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        """The thread's transport; for a slash command its ``response_url`` first (no membership needed)."""
        transport = self._web_transport(message)
        if message.pressed is not None:
            # A press happened on the bot's own message, so the bot is in that conversation: public
            # answers go to the thread with the Web API, and the press's response_url (5 responses)
            # is kept for private ones (private_transport).
            return transport
        response_url = self._response_urls.for_message(message)
        if response_url is None:
            return transport
        return SlackResponseTransport(
            response_url, "in_channel", transport, channel=message.chat, command=self._command_name(message)
        )

    def private_transport(self, message: InboundMessage) -> ReplyTransport | None:
        """What only the sender sees: an ephemeral response to a slash command, else ``chat.postEphemeral``.

        A DM with the bot is private already (None: the usual transport). Where Slack refuses the
        ephemeral (the bot or the user is not in the channel), the answer falls back to the conversation.
        """
        response_url = self._response_urls.for_message(message)
        if response_url is None and message.is_private:
            return None
        public = self.reply_transport(message)
        client = self._client()
        # An ephemeral message in a thread is shown only if the thread already has replies: use the
        # thread only when the question itself was written inside one.
        thread = message.context.get("thread_ts") if message.topic else None
        ephemeral = SlackEphemeralTransport(
            client, message.chat, message.sender.id, str(thread) if thread else None, public
        )
        if response_url is None:
            return ephemeral
        return SlackResponseTransport(
            response_url, "ephemeral", ephemeral, channel=message.chat, command=self._command_name(message)
        )

    def _client(self) -> AsyncWebClient:
        if self.client is None:
            self.client = self._web_client()
        return self.client

    def _web_transport(self, message: InboundMessage) -> SlackTransport:
        return SlackTransport(
            self._client(),
            message.chat,
            message.topic,
            native=self.config.native_streaming,
            user=message.sender.id,
            team=message.workspace,
            status_interval=self.config.status_interval_seconds,
        )

    @staticmethod
    def _command_name(message: InboundMessage) -> str:
        return str(message.context.get("command") or "a slash command")

    # --- files -----------------------------------------------------------------------------------
    async def _download(self, file: InboundFile, max_bytes: int) -> bytes:
        """Fetch a private file with the bot token, which is only ever sent to Slack's own hosts."""
        url = file.ref
        if not url.startswith(("http://", "https://")):
            client = self.client or self._web_client()
            with calling("files.info"):
                info = await client.files_info(file=url)
            url = str(info["file"].get("url_private_download") or info["file"].get("url_private") or "")
        if not self._trusted_file_host(url):
            raise Forbidden(f"refusing to send the bot token to {urlparse(url).hostname!r}")
        headers = {"Authorization": f"Bearer {self.config.bot_token}"}
        limit = min(max_bytes, self.config.max_file_bytes)
        try:
            timeout = aiohttp.ClientTimeout(total=300)
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(url, headers=headers) as response,
            ):
                if response.status in (401, 403):
                    raise Forbidden(f"file download refused (HTTP {response.status}); is files:read granted?")
                if response.status >= 500:
                    raise NetworkError(f"file download failed (HTTP {response.status})")
                if response.status >= 400:
                    raise BadRequest(f"file download failed (HTTP {response.status})")
                if "text/html" in response.headers.get("Content-Type", "") and file.mime != "text/html":
                    raise Forbidden("Slack returned a login page instead of the file; is files:read granted?")
                data = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    data.extend(chunk)
                    if len(data) > limit:
                        break  # Channel.download turns the oversize result into FileTooLarge
                return bytes(data)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise slack_error("file download", exc) from exc

    def _trusted_file_host(self, url: str) -> bool:
        host = (urlparse(url).hostname or "").lower()
        api_host = (urlparse(self.api_base_url).hostname or "").lower()
        return bool(host) and (host == api_host or host == "slack.com" or host.endswith(".slack.com"))

    # --- doctor ----------------------------------------------------------------------------------
    async def check(self) -> str | None:
        """auth.test with the bot token, apps.connections.open with the app token."""
        client = self._web_client()
        try:
            await client.auth_test()
        except SlackApiError as exc:
            return f"Slack rejected bot_token: {exc.response.get('error')}"
        except Exception as exc:
            return f"cannot reach Slack at {self.api_base_url}: {slack_error('auth.test', exc)}"
        try:
            await client.apps_connections_open(app_token=self.config.app_token or "")
        except SlackApiError as exc:
            return (
                f"Slack rejected app_token ({exc.response.get('error')}); it must be an app-level "
                "token (xapp-…) with connections:write, and Socket Mode must be enabled"
            )
        except Exception as exc:
            return f"cannot reach Slack at {self.api_base_url}: {slack_error('apps.connections.open', exc)}"
        return None
