"""Answers that do not need the bot in the channel: a slash command's ``response_url``, and ephemerals.

Why: a slash command can be used in any conversation, also a channel the bot never joined and a DM
between two people, where ``chat.postMessage`` is refused (``not_in_channel`` / ``channel_not_found``).
Slack hands every slash command a ``response_url`` that posts into that conversation without
membership, visible to everyone (``response_type: "in_channel"``) or only to the person who typed the
command (``"ephemeral"``, Slack's default). Slack documents two limits on it: at most **5** responses,
within **30 minutes** of the command. Past either — or when Slack refuses a response — these transports
fall back to the Web API (``chat.postMessage``, or ``chat.postEphemeral`` for a private answer).

Streaming: none through a ``response_url``. Slack documents ``replace_original`` for the message an
interaction came from; a slash command has no such message, and every replacement would spend one of
the five responses, so a streamed answer would use the URL up within seconds. A reply to a slash
command therefore sends its final text only (:class:`FinalOnly`); ``edit`` uses ``replace_original``
solely to correct the newest response while responses remain.

The URL is a bearer secret (anyone holding it can post as the app in that conversation for 30 minutes):
it lives in ``InboundMessage.context`` and in this module, and no log line or error text contains it.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from channels.errors import ChannelError, EditFailed, Forbidden
from channels.reply import NativeStream, ReplyTransport
from channels.slack.api import calling
from channels.slack.format import to_mrkdwn
from channels.types import Action, InboundMessage

log = logging.getLogger(__name__)

#: Slack: a response_url takes at most 5 responses …
RESPONSE_URL_USES = 5
#: … within 30 minutes of the command. A minute is kept back for clock skew and a slow last request.
RESPONSE_URL_LIFETIME = 30 * 60 - 60
#: Remembered response_urls (one per slash command), oldest forgotten first.
MAX_TRACKED_URLS = 2000
#: Web API answers that mean "the bot cannot post into this conversation".
NOT_A_MEMBER = ("not_in_channel", "channel_not_found", "user_not_in_channel")
#: Prefixes of the references these transports return (the rest is a counter or a ``ts``).
RESPONSE_REF = "response:"
EPHEMERAL_REF = "ephemeral:"

# The SDK prints the webhook URL in its debug lines whenever its logger's *own* level is DEBUG or
# unset; a dedicated logger pinned at WARNING keeps the URL out of the logs at every log level.
_webhook_log = logging.getLogger("switchboard.slack.response_url")
_webhook_log.setLevel(logging.WARNING)


#: ``"response_url": "…"`` as the SDK prints an envelope (JSON or a Python dict's repr).
_URL_VALUE = re.compile(r"""(["']response_url["']\s*:\s*)(["'])[^"']*\2""")


class RedactResponseUrls(logging.Filter):
    """Blanks response_urls in the SDK's log lines: Socket Mode prints every envelope at DEBUG.

    Attached to the bolt app's logger before the app is built; bolt copies a base logger's filters to
    the loggers it derives from it, so its listeners' lines are covered too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "response_url" in text:
            record.msg, record.args = _URL_VALUE.sub(r"\1\2(redacted)\2", text), None
        return True


REDACT_RESPONSE_URLS = RedactResponseUrls()


@dataclass
class ResponseUrl:
    """One slash command's ``response_url`` and what is left of it, shared by every reply to it."""

    url: str = field(repr=False)
    expires_at: float  # wall clock: the command's ``received_at`` survives a restart in the inbox
    used: int = 0
    dead: bool = False  # Slack refused it: nothing more is sent to it

    def usable(self) -> bool:
        return not self.dead and self.used < RESPONSE_URL_USES and time.time() < self.expires_at


class ResponseUrls:
    """The channel's response_urls by slash command, so a public and a private answer share the count.

    Kept in memory: after a restart a command's count starts at zero again, and should Slack then
    refuse a response, that answer simply moves to the Web API.
    """

    def __init__(self, max_urls: int = MAX_TRACKED_URLS) -> None:
        self.max_urls = max_urls
        self._urls: OrderedDict[str, ResponseUrl] = OrderedDict()

    def for_message(self, message: InboundMessage) -> ResponseUrl | None:
        url = message.context.get("response_url")
        if not url:
            return None
        key = message.platform_message_id
        state = self._urls.get(key)
        if state is None:
            state = self._urls[key] = ResponseUrl(str(url), message.received_at + RESPONSE_URL_LIFETIME)
            while len(self._urls) > self.max_urls:
                self._urls.popitem(last=False)
        return state


class FinalOnly(NativeStream):
    """A "live message" that shows nothing: the reply stream then sends only the final text.

    ``closes_in_place`` False makes the stream skip :meth:`close` and send the final text as ordinary
    messages — through the response_url, one response per chunk.
    """

    closes_in_place = False

    async def begin(self, placeholder: str) -> str | None:
        return None

    async def show(self, text: str) -> None:
        return None

    async def close(self, text: str) -> str | None:
        return None


class SlackEphemeralTransport(ReplyTransport):
    """``chat.postEphemeral``: a message only ``user`` sees, in a channel the bot is a member of.

    Slack refuses it where the bot is not in the channel (``not_in_channel``, ``channel_not_found``) or the
    user is not (``user_not_in_channel``); then the answer goes through ``fallback`` (the conversation's
    ordinary transport), as the caller decided. Ephemeral messages cannot be edited with ``chat.update``,
    so an edit is refused and the reply stream sends a new one.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        user: str,
        thread_ts: str | None,
        fallback: ReplyTransport,
    ) -> None:
        self.client = client
        self.channel = channel
        self.user = user
        self.thread_ts = thread_ts
        self.fallback = fallback
        self._refused = False

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        if self._refused:
            return await self.fallback.send(text, fallback=fallback)
        try:
            with calling("chat.postEphemeral"):
                response = await self.client.chat_postEphemeral(
                    channel=self.channel,
                    user=self.user,
                    thread_ts=self.thread_ts,
                    text=to_mrkdwn(text),
                )
        except Forbidden as exc:
            if not str(exc).endswith(NOT_A_MEMBER):
                raise
            self._refused = True
            log.warning(
                "slack: chat.postEphemeral refused in %s (%s); this private answer goes to the "
                "conversation instead (the bot or the asker is not a member of it)",
                self.channel,
                str(exc).rsplit(": ", 1)[-1],
            )
            return await self.fallback.send(text, fallback=fallback)
        return EPHEMERAL_REF + str(response.get("message_ts") or "")

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if ref.startswith(EPHEMERAL_REF):
            raise EditFailed("chat.update cannot edit an ephemeral message")
        await self.fallback.edit(ref, text)

    async def send_files(self, files: Sequence[Path]) -> None:
        await self.fallback.send_files(files)


class SlackResponseTransport(ReplyTransport):
    """Answers one slash command through its ``response_url``, then through ``fallback``.

    ``response_type`` is ``"in_channel"`` for an ordinary answer and ``"ephemeral"`` for a private one.
    ``fallback`` (``chat.postMessage`` or ``chat.postEphemeral``) takes over once the URL is used up,
    expired or refused; when that is refused too because the bot is not in the conversation, the log
    says so in words before the error goes to the reply stream.
    """

    def __init__(
        self,
        state: ResponseUrl,
        response_type: str,
        fallback: ReplyTransport,
        *,
        channel: str,
        command: str = "slash command",
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.state = state
        self.response_type = response_type
        self.fallback = fallback
        self.channel = channel
        self.command = command
        self.session = session
        self._posted = 0  # responses this transport made; the newest one is the one replace_original hits

    def native_stream(self, actions: Sequence[Action] = ()) -> NativeStream | None:
        return FinalOnly()

    async def _respond(self, text: str, *, replace: bool) -> bool:
        """One POST to the response_url; False when it is not usable (any more)."""
        state = self.state
        if not state.usable():
            return False
        state.used += 1  # counted before the request: Slack counts a response that timed out on our side
        client = AsyncWebhookClient(state.url, timeout=10, session=self.session, logger=_webhook_log)
        try:
            response = await client.send(
                text=to_mrkdwn(text),
                response_type=self.response_type,
                replace_original=replace,
                unfurl_links=False,
                unfurl_media=False,
            )
        except Exception as exc:  # any failure: the text of some would carry the URL, so only the type
            state.dead = True
            log.info(
                "slack: the response_url of %s failed (%s); answering with the Web API",
                self.command,
                type(exc).__name__,
            )
            return False
        if response.status_code >= 300:
            state.dead = True
            reason = (response.body or "").strip()[:60] or "no reason given"
            log.info(
                "slack: the response_url of %s was refused (HTTP %d: %s); answering with the Web API",
                self.command,
                response.status_code,
                reason,
            )
            return False
        return True

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        if await self._respond(text, replace=False):
            self._posted += 1
            return f"{RESPONSE_REF}{self._posted}"
        try:
            return await self.fallback.send(text, fallback=fallback)
        except ChannelError as exc:
            self._explain(exc)
            raise

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if not ref.startswith(RESPONSE_REF):
            await self.fallback.edit(ref, text)
            return
        # replace_original replaces the newest response only; an older one cannot be reached again.
        if ref != f"{RESPONSE_REF}{self._posted}" or not await self._respond(text, replace=True):
            raise EditFailed("a response_url answer can no longer be replaced")

    async def send_files(self, files: Sequence[Path]) -> None:
        try:
            await self.fallback.send_files(files)
        except ChannelError as exc:
            self._explain(exc)
            raise

    def _explain(self, exc: ChannelError) -> None:
        code = str(exc).rsplit(": ", 1)[-1]
        if isinstance(exc, Forbidden) and code in NOT_A_MEMBER:
            log.warning(
                "slack: cannot answer %s in %s: its response_url is used up, expired or refused, and "
                "the Web API refuses to post there (%s) because the bot is not a member of that "
                "conversation — invite the bot (/invite @Switchboard) or ask in a DM with it",
                self.command,
                self.channel,
                code,
            )


__all__ = [
    "REDACT_RESPONSE_URLS",
    "FinalOnly",
    "ResponseUrl",
    "ResponseUrls",
    "SlackEphemeralTransport",
    "SlackResponseTransport",
]
