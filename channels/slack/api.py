"""The Slack side of a reply: post, update, upload — and the one place Slack errors become ours.

Pacing, splitting and retries live in the shared :class:`channels.reply.ReplyStream`; this module only
turns each of its calls into one Web API call and every failure into a :mod:`channels.errors` type, so
the stream knows whether to wait (``RetryAfter``), give up editing (``EditFailed``), or stop (``Forbidden``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from channels.errors import (
    BadRequest,
    ChannelError,
    EditFailed,
    Forbidden,
    NetworkError,
    RetryAfter,
)
from channels.reply import NativeStream, ReplyTransport
from channels.slack.format import to_mrkdwn
from channels.types import Action

#: The message can no longer be edited: the stream falls back to posting a new one.
EDIT_ERRORS = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})
#: The bot may not act here (or at all): permanent for that call, so the reply gives up at once
#: (``Forbidden`` is never retried, unlike ``NetworkError`` and ``RetryAfter``).
FORBIDDEN_ERRORS = frozenset(
    {
        "not_in_channel",
        "channel_not_found",
        "user_not_in_channel",
        "missing_scope",
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "is_archived",
        "restricted_action",
        "not_allowed_token_type",
        "ekm_access_denied",
        "access_denied",
    }
)
#: Slack's own trouble: worth retrying later.
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
DEFAULT_RETRY_AFTER = 1.0
#: chat.startStream / appendStream / stopStream take at most 12,000 characters of markdown per call.
STREAM_TEXT_LIMIT = 12_000
#: What ``assistant.threads.setStatus`` shows under the thread while the model thinks or a tool runs.
THINKING_STATUS = "is thinking…"
#: Block Kit limits (docs.slack.dev/reference/block-kit): a section's text is at most 3,000 characters,
#: a button's text (plain_text) at most 75 and its ``value`` at most 2,000; an actions block holds at
#: most 25 elements and a message at most 50 blocks.
SECTION_TEXT_LIMIT = 3000
BUTTON_TEXT_LIMIT = 75
BUTTON_VALUE_LIMIT = 2000
MAX_BUTTONS = 25
#: Prefix of our buttons' ``action_id``: the channel's ``block_actions`` listener matches only these.
ACTION_ID_PREFIX = "switchboard-"


def slack_error(method: str, exc: BaseException) -> ChannelError:
    """Map any failure of a Slack call to the channel error tree. The text never contains a token."""
    if isinstance(exc, ChannelError):
        return exc
    if isinstance(exc, SlackApiError):
        response = exc.response
        code = str(response.get("error") or "unknown_error")
        status = getattr(response, "status_code", 200)
        if status == 429 or code == "ratelimited":
            return RetryAfter(_retry_after(response), f"{method}: ratelimited")
        if code in EDIT_ERRORS:
            return EditFailed(f"{method}: {code}")
        if code in FORBIDDEN_ERRORS:
            return Forbidden(f"{method}: {code}")
        if code in TRANSIENT_ERRORS or status >= 500:
            return NetworkError(f"{method}: {code} (HTTP {status})")
        return BadRequest(f"{method}: {code}")
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | OSError):
        return NetworkError(f"{method}: {type(exc).__name__}: {exc}")
    if isinstance(exc, SlackClientError):  # e.g. the file upload step of files_upload_v2 failed
        return NetworkError(f"{method}: {exc}")
    return BadRequest(f"{method}: {type(exc).__name__}: {exc}")


def _retry_after(response: object) -> float:
    headers = getattr(response, "headers", None) or {}
    for key, value in dict(headers).items():
        if str(key).lower() == "retry-after":
            with contextlib.suppress(TypeError, ValueError):
                return float(value)
    return DEFAULT_RETRY_AFTER


def _sections(mrkdwn: str) -> list[dict[str, Any]]:
    """The text as section blocks of at most 3,000 characters each, cut at line ends where possible.

    A reply chunk may be up to ``TEXT_LIMIT`` Markdown characters, and escaping makes mrkdwn longer, so
    one chunk can need two sections; cutting between lines keeps a line's formatting intact.
    """
    sections: list[dict[str, Any]] = []
    rest = mrkdwn if mrkdwn.strip() else "…"
    while rest:
        if len(rest) <= SECTION_TEXT_LIMIT:
            piece, rest = rest, ""
        else:
            cut = rest.rfind("\n", 0, SECTION_TEXT_LIMIT)
            cut = cut if cut > 0 else SECTION_TEXT_LIMIT
            piece, rest = rest[:cut], rest[cut:].lstrip("\n")
        if piece.strip():
            sections.append({"type": "section", "text": {"type": "mrkdwn", "text": piece}})
    return sections


def _label(text: str) -> str:
    return text if len(text) <= BUTTON_TEXT_LIMIT else text[: BUTTON_TEXT_LIMIT - 1] + "…"


def blocks_for(mrkdwn: str, actions: Sequence[Action]) -> list[dict[str, Any]]:
    """Block Kit for a message with buttons: its text in sections, then one ``actions`` block.

    Without actions the list is empty: ``chat.update`` keeps a message's old blocks unless it is given
    ``blocks: []``, so that is how the buttons come off. Each button's ``value`` is the action's
    command (what a press means), its ``action_id`` unique in the block.
    """
    if not actions:
        return []
    buttons: list[dict[str, Any]] = []
    for index, action in enumerate(actions[:MAX_BUTTONS]):
        if len(action.command) > BUTTON_VALUE_LIMIT:
            raise BadRequest(f"a button's command is longer than {BUTTON_VALUE_LIMIT} characters")
        button: dict[str, Any] = {
            "type": "button",
            "action_id": f"{ACTION_ID_PREFIX}{index}",
            "text": {"type": "plain_text", "text": _label(action.label), "emoji": True},
            "value": action.command,
        }
        if action.style in ("primary", "danger"):
            button["style"] = action.style
        buttons.append(button)
    return [*_sections(mrkdwn), {"type": "actions", "elements": buttons}]


@contextlib.contextmanager
def calling(method: str) -> Iterator[None]:
    """``with calling("chat.update"): ...`` re-raises whatever happens as a :class:`ChannelError`."""
    try:
        yield
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise slack_error(method, exc) from exc


class SlackStream(NativeStream):
    """Slack's native streaming message: ``chat.startStream``, ``appendStream`` …, ``stopStream``.

    Why: the answer grows in one message as Slack renders it, with no ``chat.update`` per step (Tier 3,
    about 50/min). Slack's stream only *appends*, so when the newest text is not an extension of what
    was appended (a progress line the manager replaced, or the answer passing the split limit) the
    stream is stopped and this reply continues on ``chat.update`` of the same message — the error
    raised here tells the reply stream to fall back. The text is Markdown (``markdown_text``), not
    mrkdwn.
    """

    def __init__(self, transport: SlackTransport, thread_ts: str, user: str, team: str) -> None:
        self.transport = transport
        self.thread_ts = thread_ts
        self.user = user
        self.team = team
        self.ts: str | None = None
        self.appended = ""
        self.stopped = False

    async def begin(self, placeholder: str) -> str | None:
        if placeholder.strip(" .…"):
            # A notice ("⏳ Queued …") would stay in an append-only stream for good, and a queued reply
            # must be a plain message a restart can edit: that reply takes the edit path.
            raise EditFailed("a notice cannot be taken back from an append-only stream")
        # Outside a DM Slack needs to know whom the stream is for.
        in_dm = self.transport.channel.startswith("D")
        with calling("chat.startStream"):
            response = await self.transport.client.chat_startStream(
                channel=self.transport.channel,
                thread_ts=self.thread_ts,
                recipient_user_id=None if in_dm else self.user,
                recipient_team_id=None if in_dm or not self.team else self.team,
            )
        self.ts = str(response["ts"])
        return self.ts

    def _delta(self, text: str) -> str:
        if not text.startswith(self.appended):
            raise EditFailed("the new text does not extend the streamed text")
        delta = text[len(self.appended) :]
        if len(delta) > STREAM_TEXT_LIMIT:
            raise BadRequest(f"more than {STREAM_TEXT_LIMIT} characters in one stream call")
        return delta

    async def show(self, text: str) -> None:
        try:
            delta = self._delta(text)
        except ChannelError:
            await self._stop(None)  # the reply continues with chat.update on the same message
            raise
        if not delta:
            return
        assert self.ts is not None
        with calling("chat.appendStream"):
            await self.transport.client.chat_appendStream(
                channel=self.transport.channel, ts=self.ts, markdown_text=delta
            )
        self.appended = text

    async def close(self, text: str) -> str | None:
        try:
            delta = self._delta(text)
        except ChannelError:
            await self._stop(None)
            raise
        await self._stop(delta or None)
        self.appended = text
        return self.ts

    async def _stop(self, markdown: str | None) -> None:
        """``stopStream`` once — also when the reply ends in an error or /stop (the manager finishes it)."""
        if self.stopped or self.ts is None:
            return
        with calling("chat.stopStream"):
            await self.transport.client.chat_stopStream(
                channel=self.transport.channel, ts=self.ts, markdown_text=markdown or None
            )
        self.stopped = True


class SlackTransport(ReplyTransport):
    """Replies in one conversation: a channel, and the thread inside it when there is one."""

    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str | None,
        *,
        native: bool = False,
        user: str = "",
        team: str = "",
        status_interval: float | None = None,
    ) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts
        self.native = native and thread_ts is not None  # chat.startStream requires a thread_ts
        self.user = user
        self.team = team
        # The assistant status belongs to a thread; a top-level DM has none to show it under.
        self.typing_interval = status_interval if thread_ts is not None else None
        self._status_refused = False

    #: Buttons are Block Kit ``actions`` blocks on chat.postMessage / chat.update.
    supports_actions = True

    def native_stream(self, actions: Sequence[Action] = ()) -> NativeStream | None:
        """Slack's stream for a reply in a thread, where the operator chose it (``native_streaming``).

        chat.startStream and chat.appendStream take no blocks; only chat.stopStream does, rendered at
        the bottom of the *finished* message — too late for a Stop button. So the choice is the
        operator's: ``native_streaming: true`` streams thread replies natively without their Stop
        button; the default (off) posts and updates them with the button.
        """
        if not self.native or self.thread_ts is None:
            return None
        return SlackStream(self, self.thread_ts, self.user, self.team)

    async def typing(self) -> None:
        """``assistant.threads.setStatus`` ("is thinking…"); Slack clears it when the reply lands.

        Slack refuses it outside assistant threads; after one refusal this reply stops asking.
        """
        if self.thread_ts is None or self._status_refused:
            return
        try:
            with calling("assistant.threads.setStatus"):
                await self.client.assistant_threads_setStatus(
                    channel_id=self.channel, thread_ts=self.thread_ts, status=THINKING_STATUS
                )
        except (BadRequest, Forbidden, EditFailed):
            self._status_refused = True
            raise

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        """chat.postMessage; with ``actions`` the text goes in section blocks above the buttons and
        ``text`` stays as the notification / accessibility fallback Slack asks for."""
        mrkdwn = to_mrkdwn(text)
        blocks = blocks_for(mrkdwn, () if fallback else actions)
        with calling("chat.postMessage"):
            response = await self.client.chat_postMessage(
                channel=self.channel,
                thread_ts=self.thread_ts,
                text=mrkdwn,
                blocks=blocks or None,
                unfurl_links=False,
                unfurl_media=False,
            )
        return str(response["ts"])

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        """chat.update replaces text and blocks; ``blocks: []`` when there are no buttons removes any
        the message had (without the field Slack would keep the old ones)."""
        mrkdwn = to_mrkdwn(text)
        with calling("chat.update"):
            await self.client.chat_update(
                channel=self.channel, ts=ref, text=mrkdwn, blocks=blocks_for(mrkdwn, actions)
            )

    async def send_files(self, files: Sequence[Path]) -> None:
        if not files:
            return
        uploads = [{"file": str(path), "filename": path.name, "title": path.name} for path in files]
        with calling("files.upload_v2"):
            await self.client.files_upload_v2(
                file_uploads=uploads, channel=self.channel, thread_ts=self.thread_ts
            )
