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
from channels.reply import ReplyTransport
from channels.slack_format import to_mrkdwn

#: The message can no longer be edited: the stream falls back to posting a new one.
EDIT_ERRORS = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})
#: The bot may not act here (or at all); retrying will not help.
FORBIDDEN_ERRORS = frozenset(
    {
        "not_in_channel",
        "channel_not_found",
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
    }
)
#: Slack's own trouble: worth retrying later.
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
DEFAULT_RETRY_AFTER = 1.0


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


@contextlib.contextmanager
def calling(method: str) -> Iterator[None]:
    """``with calling("chat.update"): ...`` re-raises whatever happens as a :class:`ChannelError`."""
    try:
        yield
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise slack_error(method, exc) from exc


class SlackTransport(ReplyTransport):
    """Replies in one conversation: a channel, and the thread inside it when there is one."""

    def __init__(self, client: AsyncWebClient, channel: str, thread_ts: str | None) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts

    async def send(self, text: str, *, fallback: bool = False) -> str:
        with calling("chat.postMessage"):
            response = await self.client.chat_postMessage(
                channel=self.channel,
                thread_ts=self.thread_ts,
                text=to_mrkdwn(text),
                unfurl_links=False,
                unfurl_media=False,
            )
        return str(response["ts"])

    async def edit(self, ref: str, text: str) -> None:
        with calling("chat.update"):
            await self.client.chat_update(channel=self.channel, ts=ref, text=to_mrkdwn(text))

    async def send_files(self, files: Sequence[Path]) -> None:
        if not files:
            return
        uploads = [{"file": str(path), "filename": path.name, "title": path.name} for path in files]
        with calling("files.upload_v2"):
            await self.client.files_upload_v2(
                file_uploads=uploads, channel=self.channel, thread_ts=self.thread_ts
            )
