"""Replies on Discord: send, then ``message.edit``; files as ``discord.File``; the one error mapping.

A reply's actions ride along as buttons (:mod:`channels.discord.buttons`) on sends and edits; an edit
always says which buttons the message keeps, so one without actions sends ``components: []`` (Discord
keeps a message's components when an edit leaves the field out).

Pacing, splitting and the final-delivery guarantee live in :class:`channels.reply.ReplyStream`; this module
only turns those calls into discord.py calls and discord.py's failures into :mod:`channels.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import aiohttp
import discord

from channels.discord.buttons import action_view, send_kwargs
from channels.discord.host import DiscordHost
from channels.errors import (
    BadRequest,
    ChannelError,
    EditFailed,
    Forbidden,
    NetworkError,
    RetryAfter,
)
from channels.reply import ReplyTransport
from channels.types import Action, InboundMessage

log = logging.getLogger(__name__)

#: Discord allows at most this many attachments on one message.
MAX_FILES_PER_MESSAGE = 10
#: A typing indicator lasts about 10 s; refresh a little before it runs out while work goes on.
TYPING_REFRESH_SECONDS = 8.0
#: A reply whose finish() never came (a crash mid-turn) must not type forever.
TYPING_MAX_SECONDS = 600.0
#: Discord JSON error code for an edit of a message that no longer exists.
UNKNOWN_MESSAGE = 10008

#: Never ping anyone: not @everyone/@here, not roles, not users, not the replied-to author.
NO_MENTIONS = discord.AllowedMentions.none()


async def send_files_in_batches(
    files: Sequence[Path],
    limit: int,
    send_batch: Callable[[list[Path], list[discord.File]], Awaitable[None]],
    say: Callable[[str], Awaitable[object]],
) -> None:
    """Send ``files`` as Discord allows them: at most :data:`MAX_FILES_PER_MESSAGE` a message, none
    larger than ``limit`` bytes; those are named in one line (``say``) instead.

    ``send_batch`` gets each batch as paths and as opened uploads (a channel message sends the uploads;
    an interaction's fallback opens its own from the paths); the uploads are closed after it returns.
    The channel transport and the interaction transport both send files this way.
    """
    fitting = [p for p in files if p.stat().st_size <= limit]
    too_big = [p.name for p in files if p.stat().st_size > limit]
    for start in range(0, len(fitting), MAX_FILES_PER_MESSAGE):
        batch = fitting[start : start + MAX_FILES_PER_MESSAGE]
        uploads = [discord.File(path, filename=path.name) for path in batch]
        try:
            await send_batch(batch, uploads)
        finally:
            for upload in uploads:
                upload.close()
    if too_big:
        mib = limit // (1024 * 1024)
        await say(f"(not attached, larger than {mib} MiB: {', '.join(too_big)})")


def map_discord_error(exc: BaseException) -> ChannelError:
    """The single place where discord.py (and aiohttp) failures become :mod:`channels.errors` types.

    discord.py already sleeps through ordinary 429s itself; what reaches us is a 429 it refused to wait
    for (``RateLimited``, longer than ``max_ratelimit_timeout``) or one without Discord's ``Via`` header
    (it assumes a Cloudflare block). Either way the scheduler should wait ``retry_after``.
    """
    if isinstance(exc, ChannelError):
        return exc
    if isinstance(exc, discord.RateLimited):
        return RetryAfter(exc.retry_after, "Discord rate limit")
    if isinstance(exc, discord.HTTPException):
        detail = f"Discord {exc.status} (code {exc.code}): {exc.text or exc.response.reason}"
        if exc.status == 429:
            return RetryAfter(_retry_after(exc), "Discord rate limit")
        if isinstance(exc, discord.NotFound):
            # A deleted reply cannot be edited, but a fresh message may still land in the channel.
            return EditFailed(detail) if exc.code == UNKNOWN_MESSAGE else Forbidden(detail)
        if isinstance(exc, discord.Forbidden):
            return Forbidden(detail)
        if exc.status >= 500:
            return NetworkError(detail)
        return BadRequest(detail)
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | OSError):
        return NetworkError(f"Discord unreachable: {type(exc).__name__}")
    return ChannelError(f"Discord call failed: {type(exc).__name__}")


def _retry_after(exc: discord.HTTPException) -> float:
    header = exc.response.headers.get("Retry-After") if exc.response is not None else None
    try:
        return float(header) if header is not None else 1.0
    except ValueError:
        return 1.0


@contextlib.contextmanager
def discord_errors() -> Iterator[None]:
    """Wrap one discord.py call so only :mod:`channels.errors` types escape."""
    try:
        yield
    except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
        raise map_discord_error(exc) from exc


class DiscordTransport(ReplyTransport):
    """Answers one inbound message in the channel/thread/DM recorded in its ``context``."""

    supports_actions = True

    def __init__(self, channel: DiscordHost, message: InboundMessage) -> None:
        self.channel = channel
        self.message = message
        self.target_id = int(message.context.get("reply_channel") or message.chat)
        reference = message.context.get("reference")
        self.reference = (
            discord.MessageReference(
                message_id=int(reference), channel_id=self.target_id, fail_if_not_exists=False
            )
            if reference
            else None
        )
        self._typing_task: asyncio.Task[None] | None = None

    def _target(self) -> discord.PartialMessageable:
        # A partial messageable needs no cache: replies keep working across restarts and reconnects.
        return self.channel.client.get_partial_messageable(self.target_id)

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        kwargs: dict[str, object] = {"content": text, "allowed_mentions": NO_MENTIONS, **send_kwargs(actions)}
        if self.reference is not None:
            kwargs["reference"] = self.reference
            kwargs["mention_author"] = False
        with discord_errors():
            sent = await self._target().send(**kwargs)  # type: ignore[call-overload]
        self._keep_typing()
        return str(sent.id)

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if not ref.isdigit():  # an interaction's message, whose token this process no longer holds
            raise EditFailed(f"cannot edit {ref!r} as a channel message")
        with discord_errors():
            await (
                self._target()
                .get_partial_message(int(ref))
                .edit(content=text, allowed_mentions=NO_MENTIONS, view=action_view(actions))
            )

    async def send_files(self, files: Sequence[Path]) -> None:
        async def send_batch(_batch: list[Path], uploads: list[discord.File]) -> None:
            with discord_errors():
                await self._target().send(files=uploads, allowed_mentions=NO_MENTIONS)

        await send_files_in_batches(files, self.channel.config.max_file_bytes, send_batch, self.send)

    async def typing(self) -> None:
        """Trigger Discord's "<bot> is typing…" once; it is cosmetic, so failures are only logged."""
        try:
            with discord_errors():
                await self.channel.client.http.send_typing(self.target_id)
        except Exception as exc:  # includes a client closed mid-shutdown
            log.debug("typing indicator failed: %s", exc)

    def _keep_typing(self) -> None:
        """While a reply is being worked on, refresh the typing indicator.

        Discord has no "stop typing" call (sending a message clears it, an edit does not), so the first
        refresh waits a full period: quick answers never leave a stale indicator behind.
        """
        if self._typing_task is None:
            self._typing_task = asyncio.create_task(self._typing_loop(), name="discord-typing")

    async def _typing_loop(self) -> None:
        for _ in range(int(TYPING_MAX_SECONDS / TYPING_REFRESH_SECONDS)):
            await asyncio.sleep(TYPING_REFRESH_SECONDS)
            await self.typing()

    async def finished(self) -> None:
        if self._typing_task is not None:
            self._typing_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._typing_task
            self._typing_task = None
