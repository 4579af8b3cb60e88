"""Slash commands arriving as interactions: store, answer within 3 s, then reply through the interaction.

Discord shows "The application did not respond" unless an interaction gets its first callback within
3 seconds, accepts exactly one such callback (a second is refused, code 40060), and keeps the interaction
token usable for 15 minutes for edits and followup messages. So for each INTERACTION_CREATE:

1. The command becomes an :class:`InboundMessage` with text ``/name args`` and is stored through the sink,
   like a typed command. A full inbox (``Backpressure``) or a failed store is answered at once with a
   short message only the sender sees; Discord never sends an interaction again, so it must say so.
2. The manager's answer normally arrives within milliseconds and becomes the callback itself (type 4,
   ``CHANNEL_MESSAGE_WITH_SOURCE``), ephemeral (flag 64) when the manager asked for a private answer.
3. If nothing was answered ``defer_after_seconds`` after the interaction arrived (and the store is done,
   or 2 s passed), it is deferred (type 5: "<bot> is thinking…"); the answer then edits the original
   response, and further messages of the same reply are followups on the interaction webhook.
   Ephemerality is fixed by that deferral (public): a private answer after it replaces the "thinking"
   message with a short public note and goes out as an ephemeral followup.
4. Once the token has expired (or the interaction is unknown to this process, e.g. after a restart), a
   public answer goes to the channel as an ordinary message and a private one to the sender's DMs; a
   public message already sent through the interaction is still edited in place, as the bot's own
   channel message (Discord allows that for public interaction messages, not for ephemeral ones), so
   an answer or task card that outlives the token stays one message.

A button press (type 3, ``MESSAGE_COMPONENT``) takes the same path with two differences: it is
acknowledged with type 6 (``DEFERRED_UPDATE_MESSAGE``) as soon as it is stored — the pressed message is
the interaction's "original" and stays as it is until the manager edits it as an ordinary message — and
only what the manager sends *privately* about it (a refused press) goes through the interaction, as an
ephemeral message; its public answers are ordinary messages in the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import discord

from channels.discord.buttons import (
    BUTTON_COMPONENT,
    FOLLOWUP_PREFIX,
    action_view,
    interaction_message_id,
    is_original,
    original_ref,
    pressed_ref,
    send_kwargs,
)
from channels.discord.commands import ARGS_OPTION
from channels.discord.host import DiscordHost
from channels.discord.transport import (
    NO_MENTIONS,
    DiscordTransport,
    discord_errors,
    map_discord_error,
    send_files_in_batches,
)
from channels.errors import Backpressure, ChannelError, EditFailed
from channels.reply import ReplyTransport
from channels.types import Action, InboundMessage, Sender

log = logging.getLogger(__name__)

#: Discord's window for the first callback, and how much of it we dare use for one.
ACK_WINDOW_SECONDS = 3.0
ACK_DEADLINE_SECONDS = 2.0
#: An interaction token works this long; stop using it a little before.
TOKEN_LIFETIME = timedelta(minutes=15)
TOKEN_MARGIN = timedelta(seconds=30)
#: JSON error codes: "Interaction has already been acknowledged", "Unknown interaction".
ALREADY_ACKNOWLEDGED = 40060
UNKNOWN_INTERACTION = 10062
#: "Invalid Webhook Token": the interaction's token expired (Discord's clock may run ahead of ours).
INVALID_WEBHOOK_TOKEN = 50027
#: A reply's messages sent through the interaction have references from channels.discord.buttons
#: (``@original:<id>``, ``i:<id>``), so an edit knows which webhook (or, once expired, channel) to use.
EPHEMERAL_FLAG = 64
_REMEMBERED = 1_000

BUSY_ANSWER = (
    "I'm overloaded right now and could not take that command — please run it again in a minute. "
    "(Discord does not resend slash commands.)"
)
FAILED_ANSWER = "I could not take that command just now — please run it again in a minute."
NOT_HERE_ANSWER = "I'm not enabled in this server."
RESTARTING_ANSWER = "I'm restarting — please run that command again in a minute."
PRIVATE_NOTE = "🔒 Answered privately."
PRESS_BUSY_ANSWER = (
    "I'm overloaded right now and could not take that press — please press it again in a minute."
)
PRESS_FAILED_ANSWER = "I could not take that press just now — please press it again in a minute."
PRESS_RESTARTING_ANSWER = "I'm restarting — please press that button again in a minute."

State = Literal["open", "deferred", "answered", "dead"]


class _Gone(Exception):
    """The interaction can no longer carry messages (expired, unknown, or never acknowledged in time)."""


class LiveInteraction:
    """One interaction this process received: the discord.py object and how far its response got."""

    def __init__(self, interaction: discord.Interaction, received: float) -> None:
        self.interaction = interaction
        self.received = received  # event-loop time of arrival
        self.lock = asyncio.Lock()
        self.state: State = "open"
        #: A button press: acknowledged without "thinking…", and its "original" is the pressed message.
        self.component = interaction.type is discord.InteractionType.component
        # The original response shows a real answer (not "thinking…"); a pressed message always does,
        # so nothing sent about a press ever overwrites it.
        self.original_filled = self.component
        self.stored = asyncio.Event()
        self.timer: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return str(self.interaction.id)

    def expired(self) -> bool:
        deadline = self.interaction.created_at + TOKEN_LIFETIME - TOKEN_MARGIN
        return self.state == "dead" or discord.utils.utcnow() >= deadline

    def _in_ack_window(self) -> bool:
        return asyncio.get_running_loop().time() - self.received < ACK_WINDOW_SECONDS

    def _note_refusal(self, exc: discord.HTTPException) -> None:
        if exc.code == ALREADY_ACKNOWLEDGED:
            self.state = "deferred"
        elif exc.code == UNKNOWN_INTERACTION:
            self.state = "dead"

    async def defer(self) -> None:
        """Acknowledge if nothing answered yet (the 3-second rule): "thinking…" for a command, type 6
        (nothing visible changes) for a press."""
        async with self.lock:
            if self.state != "open" or self.expired() or not self._in_ack_window():
                return
            try:
                await self.interaction.response.defer(thinking=not self.component)
            except discord.InteractionResponded:
                self.state = "deferred"
            except discord.HTTPException as exc:
                self._note_refusal(exc)
                log.warning("could not defer a Discord interaction: %s", map_discord_error(exc))
            except (TimeoutError, OSError, discord.DiscordException) as exc:
                log.warning("could not defer a Discord interaction: %s", map_discord_error(exc))
            else:
                self.state = "deferred"

    async def send(self, text: str, *, private: bool, actions: Sequence[Action] = ()) -> str:
        """Put ``text`` in the first free place: the callback, the deferred original, else a followup."""
        async with self.lock:
            if self.expired():
                raise _Gone
            if self.state == "open":
                if not self._in_ack_window():
                    self.state = "dead"
                    raise _Gone
                try:
                    with discord_errors():
                        callback = await self.interaction.response.send_message(
                            text, ephemeral=private, allowed_mentions=NO_MENTIONS, **send_kwargs(actions)
                        )
                except ChannelError as exc:
                    if isinstance(exc.__cause__, discord.HTTPException):
                        self._note_refusal(exc.__cause__)
                    if self.state == "dead":
                        raise _Gone from exc
                    if self.state == "open":
                        raise
                else:
                    self.state, self.original_filled = "answered", True
                    return original_ref(callback.message_id)
            try:
                return await self._send_on_webhook(text, private=private, actions=actions)
            except ChannelError as exc:
                if self._token_refused(exc):
                    raise _Gone from exc
                raise

    async def _send_on_webhook(self, text: str, *, private: bool, actions: Sequence[Action]) -> str:
        """After the callback: fill the deferred original, else send a followup (both on the token)."""
        if not self.original_filled:
            # Deferred publicly: the answer replaces "thinking…", or, if private, a note does.
            with discord_errors():
                original = await self.interaction.edit_original_response(
                    content=PRIVATE_NOTE if private else text,
                    allowed_mentions=NO_MENTIONS,
                    view=None if private else action_view(actions),
                )
            self.state, self.original_filled = "answered", True
            if not private:
                return original_ref(original.id)
        with discord_errors():
            sent = await self.interaction.followup.send(
                text, ephemeral=private, wait=True, allowed_mentions=NO_MENTIONS, **send_kwargs(actions)
            )
        return f"{FOLLOWUP_PREFIX}{sent.id}"

    def _token_refused(self, exc: ChannelError) -> bool:
        """Discord says the token no longer works (its clock decides, not ours): the interaction is over."""
        cause = exc.__cause__
        if isinstance(cause, discord.HTTPException) and cause.code == INVALID_WEBHOOK_TOKEN:
            self.state = "dead"
            return True
        return False

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if self.expired():
            raise EditFailed("the Discord interaction token expired")
        view = action_view(actions)  # None removes the buttons
        try:
            with discord_errors():
                if is_original(ref):
                    await self.interaction.edit_original_response(
                        content=text, allowed_mentions=NO_MENTIONS, view=view
                    )
                else:
                    await self.interaction.followup.edit_message(
                        interaction_message_id(ref) or 0,
                        content=text,
                        allowed_mentions=NO_MENTIONS,
                        view=view,
                    )
        except ChannelError as exc:
            if self._token_refused(exc):
                raise EditFailed("Discord refused the interaction's token: it expired") from exc
            raise

    async def send_files(self, files: Sequence[discord.File], *, private: bool) -> None:
        async with self.lock:
            if self.expired() or self.state in ("open", "dead"):
                raise _Gone
            with discord_errors():
                await self.interaction.followup.send(
                    files=list(files), ephemeral=private, wait=True, allowed_mentions=NO_MENTIONS
                )
            self.state, self.original_filled = "answered", True

    async def refuse(self, text: str) -> None:
        """Tell only the sender that the command was not taken (busy, failed, not allowed here)."""
        try:
            await self.send(text, private=True)
        except (ChannelError, _Gone) as exc:
            log.warning("could not tell the sender a Discord command was refused: %s", exc)


class InteractionTransport(ReplyTransport):
    """Answers an interaction's message through the interaction; falls back once the token is gone.

    ``live`` is None for an interaction this process can no longer answer through (expired, or received
    before a restart): then every message takes the fallback at once.
    """

    supports_actions = True

    def __init__(
        self,
        channel: DiscordHost,
        message: InboundMessage,
        live: LiveInteraction | None,
        *,
        private: bool,
    ) -> None:
        self.channel = channel
        self.message = message
        self.live = live
        self.private = private
        self._fallback: DiscordTransport | None = None

    async def _fallen_back(self) -> DiscordTransport:
        """The channel (public) or the sender's DMs (private) as an ordinary bot message."""
        if self._fallback is None:
            message = self.message
            if self.private and not message.is_private:
                with discord_errors():
                    dm = await self.channel.client.create_dm(discord.Object(int(message.sender.id)))
                message = dataclasses.replace(message, context={"reply_channel": str(dm.id)})
            self._fallback = DiscordTransport(self.channel, message)
        return self._fallback

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        if self._fallback is None and self.live is not None:
            try:
                return await self.live.send(text, private=self.private, actions=actions)
            except _Gone:
                log.info("Discord interaction %s is over; answering with an ordinary message", self.live.id)
        return await (await self._fallen_back()).send(text, fallback=fallback, actions=actions)

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        if not is_original(ref) and not ref.startswith(FOLLOWUP_PREFIX):
            # A channel message: sent after the fallback, or (after a restart) before it.
            await (await self._fallen_back()).edit(ref, text, actions=actions)
            return
        if self.live is not None and not self.live.expired():
            try:
                await self.live.edit(ref, text, actions=actions)
                return
            except EditFailed:
                if not self._editable_as_channel_message(ref):
                    raise
        if not self._editable_as_channel_message(ref):
            raise EditFailed("the Discord interaction can no longer be answered through")
        # The token is gone (15 minutes, or a restart), but a public message sent through the
        # interaction is the bot's own message in the channel: edit it there, in place, so a long
        # answer or a task card does not end as a second message under a stale first one.
        message_id = interaction_message_id(ref)
        await (await self._fallen_back()).edit(str(message_id), text, actions=actions)

    def _editable_as_channel_message(self, ref: str) -> bool:
        """Discord refuses channel edits of ephemeral messages ("Unknown Message"); public ones work."""
        return not self.private and interaction_message_id(ref) is not None

    async def send_files(self, files: Sequence[Path]) -> None:
        async def send_batch(batch: list[Path], uploads: list[discord.File]) -> None:
            if self._fallback is None and self.live is not None:
                try:
                    await self.live.send_files(uploads, private=self.private)
                    return
                except _Gone:
                    pass
            await (await self._fallen_back()).send_files(batch)

        await send_files_in_batches(files, self.channel.config.max_file_bytes, send_batch, self.send)

    async def typing(self) -> None:
        """While the interaction is live its "thinking…" or answer already shows that work goes on."""
        if self._fallback is not None:
            await self._fallback.typing()

    async def finished(self) -> None:
        if self._fallback is not None:
            await self._fallback.finished()


class Interactions:
    """The channel's interactions: receipt, the acknowledgement timer and the live ones by id."""

    def __init__(self, channel: DiscordHost) -> None:
        self.channel = channel
        self._live: OrderedDict[str, LiveInteraction] = OrderedDict()
        self.received = 0

    def live(self, message: InboundMessage, key: str = "interaction") -> LiveInteraction | None:
        """The live interaction ``message`` came from, if it came from one this process still can use.

        ``key`` is the context field holding its id: ``interaction`` for a slash command, whose answers
        all go through it, ``press`` for a button press, which only answers privately through it.
        """
        interaction_id = message.context.get(key)
        live = self._live.get(str(interaction_id)) if interaction_id else None
        return live if live is not None and not live.expired() else None

    def _remember(self, live: LiveInteraction) -> None:
        self._live[live.id] = live
        while len(self._live) > _REMEMBERED or (self._live and next(iter(self._live.values())).expired()):
            self._live.popitem(last=False)

    async def handle(self, interaction: discord.Interaction) -> None:
        """Store the command, then make sure Discord hears back in time (see the module doc)."""
        if interaction.type is discord.InteractionType.component:
            await self.handle_press(interaction)
            return
        if interaction.type is not discord.InteractionType.application_command:
            return
        self.received += 1
        live = LiveInteraction(interaction, asyncio.get_running_loop().time())
        self._remember(live)
        inbound = self.normalise(interaction)
        if inbound.workspace and not self.channel.guild_allowed(inbound.workspace):
            await live.refuse(NOT_HERE_ANSWER)
            return
        if self.channel.paused:  # stopping: no backfill can bring an interaction back, so say so
            await live.refuse(RESTARTING_ANSWER)
            return
        live.timer = asyncio.create_task(self._acknowledge_in_time(live), name="discord-interaction-ack")
        try:
            await self._store(live, inbound, busy=BUSY_ANSWER, failed=FAILED_ANSWER, what="interaction")
        finally:
            live.stored.set()

    async def _store(
        self, live: LiveInteraction, inbound: InboundMessage, *, busy: str, failed: str, what: str
    ) -> bool:
        """Hand ``inbound`` to the service; on refusal answer ``busy``/``failed`` to the person. True: stored.

        The caller sets ``live.stored`` afterwards (and, for a press, acknowledges first), so the
        deadline timer never answers the same interaction a second time.
        """
        sink = self.channel.sink
        try:
            if sink is None:
                raise Backpressure("the Discord channel is not started")
            await sink(inbound)
        except Backpressure:
            await live.refuse(busy)
        except Exception as exc:
            log.warning("storing Discord %s %s failed: %s", what, live.id, exc)
            await live.refuse(failed)
        else:
            return True
        return False

    async def handle_press(self, interaction: discord.Interaction) -> None:
        """Store a button press, then acknowledge it (type 6) — at once, or at the deadline at the latest.

        A press Discord delivers again (a gateway replay after a resume) carries the same interaction id:
        it meets the interaction already received, the inbox dedupes it, and nothing answers twice.
        """
        inbound = self.normalise_press(interaction)
        if inbound is None:
            return
        self.received += 1
        live = self._live.get(str(interaction.id))
        if live is None:
            live = LiveInteraction(interaction, asyncio.get_running_loop().time())
            self._remember(live)
        if inbound.workspace and not self.channel.guild_allowed(inbound.workspace):
            await live.refuse(NOT_HERE_ANSWER)
            return
        if self.channel.paused:
            await live.refuse(PRESS_RESTARTING_ANSWER)
            return
        if live.timer is None:
            live.timer = asyncio.create_task(self._acknowledge_press_in_time(live), name="discord-press-ack")
        try:
            stored = await self._store(
                live, inbound, busy=PRESS_BUSY_ANSWER, failed=PRESS_FAILED_ANSWER, what="button press"
            )
            if stored:
                await live.defer()
        finally:
            live.stored.set()

    async def _acknowledge_press_in_time(self, live: LiveInteraction) -> None:
        """The backstop for a store that hangs: Discord shows "This interaction failed" after 3 s."""
        remaining = ACK_DEADLINE_SECONDS - (asyncio.get_running_loop().time() - live.received)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(live.stored.wait(), max(0.0, remaining))
        await live.defer()

    async def _acknowledge_in_time(self, live: LiveInteraction) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, self.channel.config.defer_after_seconds - (loop.time() - live.received)))
        remaining = ACK_DEADLINE_SECONDS - (loop.time() - live.received)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(live.stored.wait(), max(0.0, remaining))
        await live.defer()

    def normalise(self, interaction: discord.Interaction) -> InboundMessage:
        """``/name args`` in the same conversation a typed command in that place would have."""
        data: dict[str, Any] = dict(interaction.data or {})
        name = str(data.get("name") or "")
        args = next(
            (str(o.get("value") or "") for o in data.get("options") or [] if o.get("name") == ARGS_OPTION), ""
        )
        return self._inbound(interaction, f"/{name} {args.strip()}".strip(), kind="interaction")

    def normalise_press(self, interaction: discord.Interaction) -> InboundMessage | None:
        """A button press as the channel contract has it (docs/channels.md, "Buttons"): the button's
        command, in the pressed message's conversation, ``pressed`` = the reference the transport
        returned for that message."""
        data: dict[str, Any] = dict(interaction.data or {})
        custom_id = data.get("custom_id")
        if data.get("component_type") != BUTTON_COMPONENT or not custom_id or interaction.message is None:
            return None  # a select menu, or a press without its message: nothing of ours
        return self._inbound(
            interaction, str(custom_id), kind="press", pressed=pressed_ref(interaction.message)
        )

    def _inbound(
        self, interaction: discord.Interaction, text: str, *, kind: str, pressed: str | None = None
    ) -> InboundMessage:
        """A command or a press, in the conversation a typed message in that place would have.

        Both are addressed to the bot by definition (a slash command, a press on the bot's own message).
        """
        workspace, chat, topic = self._place(interaction)
        user = interaction.user
        return InboundMessage(
            provider=self.channel.provider,
            workspace=workspace,
            chat=chat,
            topic=topic,
            sender=Sender(
                id=str(user.id),
                name=user.display_name,
                is_bot=user.bot,
                member=self.channel.vouches_for(
                    workspace if interaction.guild_id is not None else None, user
                ),
            ),
            text=text,
            platform_message_id=str(interaction.id),
            mentioned=True,
            is_private=interaction.guild_id is None,
            context={"reply_channel": str(interaction.channel_id or 0), kind: str(interaction.id)},
            pressed=pressed,
        )

    def _place(self, interaction: discord.Interaction) -> tuple[str, str, str | None]:
        """(workspace, chat, topic) as a typed message in that place has them (channels.discord)."""
        channel = interaction.channel
        channel_id = interaction.channel_id or 0
        guild_id = interaction.guild_id
        if guild_id is None:
            return "", str(channel_id), None
        if isinstance(channel, discord.Thread) and channel.parent_id:
            return str(guild_id), str(channel.parent_id), str(channel.id)
        parent = self.channel.thread_parent(channel_id)
        if parent is not None:
            return str(guild_id), str(parent), str(channel_id)
        return str(guild_id), str(channel_id), None
