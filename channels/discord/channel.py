"""Discord, over discord.py 2.7's gateway client.

Conversations: a DM is one conversation. In a server channel the bot answers only when mentioned
(``mention_only``, on by default); the mention opens a Discord thread from that message, and the thread is
the conversation from then on — the reply goes there, and later messages in the thread need no mention.

Nothing lost while away: the gateway never redelivers, so the channel remembers (durably, in
:mod:`channels.discord.backfill`) every channel, thread and DM where it stored a message and the id it
handled up to, and on each fresh gateway session (READY: start-up, or a reconnect Discord would not
resume) reads those channels' history after that id — at most ``backfill_minutes`` back — through the
same path as live messages. The inbox dedupes what it already holds, so each message is answered once.
A resumed session needs none of this: Discord replays the missed events itself.

Slash commands: the service's commands are registered as global application commands
(:mod:`channels.discord.commands`) and answered as interactions (:mod:`channels.discord.interactions`),
inside Discord's 3-second window and, where the manager asks for a private answer, ephemeral.

discord.py keeps its REST base (``discord.http.Route.BASE``) and gateway URL
(``DiscordWebSocket.DEFAULT_GATEWAY``) as process-wide globals. :meth:`DiscordChannel.start` sets both
from config, so **one process talks to one Discord API base** (tests point it at a local fake).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import discord
import yarl
from discord.gateway import DiscordWebSocket

from channels.base import Channel, InboundSink
from channels.discord.backfill import Cursors, CursorStore
from channels.discord.commands import sync_commands
from channels.discord.interactions import Interactions, InteractionTransport
from channels.discord.transport import DiscordTransport, discord_errors, map_discord_error
from channels.errors import Backpressure, ChannelError
from channels.reply import ReplyTransport
from channels.types import InboundFile, InboundMessage, ReplyLimits, Sender
from config.channels.discord import DiscordConfig

if TYPE_CHECKING:
    from config.schema import Settings

log = logging.getLogger(__name__)

#: 2000 characters per message; about 5 messages per 5 s per channel, so one call a second per chat.
DISCORD_LIMITS = ReplyLimits(text_limit=2000, min_edit_interval=1.0)
#: discord.py refuses values below 30 s; a longer 429 is handed to the scheduler as RetryAfter.
MAX_RATELIMIT_SLEEP = 30.0
#: Discord caps thread names at 100 characters.
THREAD_NAME_LIMIT = 100
#: JSON error code: "A thread has already been created for this message" (a redelivered mention).
THREAD_ALREADY_EXISTS = 160004
#: How long a full inbox is retried (polling at most every 2 s): the gateway cannot redeliver an event,
#: so the message waits here for room rather than being dropped.
BACKPRESSURE_WAIT_SECONDS = 30.0
BACKPRESSURE_MAX_POLL = 2.0
BUSY_NOTICE = "I'm overloaded right now and could not take that message — please send it again in a minute."
APP_FLAG_MESSAGE_CONTENT = (1 << 18) | (1 << 19)  # GATEWAY_MESSAGE_CONTENT(_LIMITED)
_REMEMBERED = 10_000
DISCORD_GATEWAY = "wss://gateway.discord.gg/"
#: At most this many messages are read back per channel after a restart (the time window bounds it too).
BACKFILL_MAX_MESSAGES = 500
#: What became of one message handed to the inbox: stored (new or already there), refused for good (the
#: sender was told to resend), or left for the next start's backfill (the service is stopping).
Outcome = Literal["stored", "refused", "left"]


def point_discord_at(config: DiscordConfig) -> None:
    """Aim discord.py's process-wide REST base and gateway URL at ``config`` (see the module doc)."""
    discord.http.Route.BASE = config.api_base_url.rstrip("/")
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(config.gateway_url or DISCORD_GATEWAY)


def bot_intents() -> discord.Intents:
    """Only what the bot reads: guilds (channels/threads), messages in guilds and DMs, and their text."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    return intents


class _Client(discord.Client):
    """discord.py calls ``on_<event>`` methods; these forward to the channel."""

    def __init__(self, owner: DiscordChannel, **options: Any) -> None:
        super().__init__(**options)
        self.owner = owner

    async def on_ready(self) -> None:
        self.owner._on_ready(fresh_session=True)

    async def on_resumed(self) -> None:
        self.owner._on_ready(fresh_session=False)

    async def on_disconnect(self) -> None:
        self.owner._on_disconnect()

    async def on_message(self, message: discord.Message) -> None:
        await self.owner._on_message(message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        try:
            await self.owner.interactions.handle(interaction)
        except Exception:  # one bad event must never take the gateway listener down
            log.exception("handling a Discord interaction failed")


class DiscordChannel(Channel):
    provider = "discord"
    limits = DISCORD_LIMITS
    # Discord does not spread one shard's events over several sessions: in a cluster, one connects.
    receives_exclusively = True

    def __init__(self, config: DiscordConfig, *, settings: Settings | None = None) -> None:
        if config.edit_interval_seconds != DISCORD_LIMITS.min_edit_interval:
            self.limits = ReplyLimits(  # type: ignore[misc]
                text_limit=DISCORD_LIMITS.text_limit, min_edit_interval=config.edit_interval_seconds
            )
        super().__init__()
        self.admins = frozenset(config.admins)
        self.trust = config.trust
        self.config = config
        self.settings = settings
        self._client: _Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stopping = False
        self._bot_threads: OrderedDict[int, int] = OrderedDict()  # threads this bot opened → parent
        # Durable where the service's database is known; in memory only (still fine across reconnects)
        # for a channel built without settings, e.g. by doctor.
        store = CursorStore(settings.database.url) if settings is not None else None
        self.cursors = Cursors(store)
        self._paused = False
        self._backfill_task: asyncio.Task[None] | None = None
        self.backfilled = 0  # messages read back from history and handed to the inbox path
        self.interactions = Interactions(self)
        self._commands_task: asyncio.Task[None] | None = None
        self.commands_synced = False  # the slash commands were checked (and overwritten if they differed)

    @property
    def backfilling(self) -> bool:
        """A backfill after READY is still reading history."""
        return self._backfill_task is not None and not self._backfill_task.done()

    @property
    def client(self) -> discord.Client:
        if self._client is None:
            raise ChannelError("the Discord channel is not started")
        return self._client

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self, sink: InboundSink) -> None:
        if not self.config.bot_token:
            self.status.set("error", "channels.discord.bot_token is not set")
            raise ChannelError("channels.discord.bot_token is not set")
        self._sink = sink
        self._stopping = self._paused = False
        self.commands_synced = False
        self._ready.clear()
        await self.cursors.start()
        point_discord_at(self.config)
        # Text only: the voice extras are not installed on purpose, so skip discord.py's warnings about them.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        client = self._client = _Client(
            self,
            intents=bot_intents(),
            guild_ready_timeout=self.config.guild_ready_timeout,
            max_ratelimit_timeout=MAX_RATELIMIT_SLEEP,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
            max_messages=None,
        )
        self.status.set("starting", "logging in")
        try:
            await client.login(self.config.bot_token)
        except discord.LoginFailure:
            await self._close_client()
            self.status.set("error", "Discord rejected the bot token")
            raise ChannelError(
                "Discord rejected the bot token (401); reset it in the Developer Portal"
            ) from None
        except Exception as exc:
            await self._close_client()
            problem = map_discord_error(exc)
            self.status.set("error", f"login failed: {problem}")
            raise problem from exc
        if self.intake_leased:  # replies over REST from here; the gateway once the lease is ours
            self._paused = True
            self.status.set(
                "connected", f"as {client.user}, replies only (another instance holds the gateway)"
            )
            return
        self._runner = asyncio.create_task(self._connect(client), name="discord-gateway")
        ready = asyncio.create_task(self._ready.wait())
        await asyncio.wait(
            {ready, self._runner}, timeout=self.config.connect_timeout, return_when=asyncio.FIRST_COMPLETED
        )
        ready.cancel()
        if self._ready.is_set():
            return
        detail = self.status.detail if self.status.state == "error" else None
        await self.stop()
        detail = detail or f"the Discord gateway did not become ready within {self.config.connect_timeout:g}s"
        self.status.set("error", detail)
        raise ChannelError(detail)

    async def _connect(self, client: discord.Client) -> None:
        """Run the gateway until stopped; discord.py reconnects and resumes by itself."""
        try:
            await client.connect(reconnect=True)
        except asyncio.CancelledError:
            raise
        except discord.PrivilegedIntentsRequired:
            self.status.set(
                "error",
                "the Message Content intent is not enabled: Developer Portal → Bot → Privileged Gateway Intents",
            )
        except discord.ConnectionClosed as exc:
            self.status.set("error", f"the Discord gateway closed the connection (code {exc.code})")
        except Exception as exc:
            log.warning("Discord gateway stopped: %s", map_discord_error(exc))
            self.status.set("error", f"gateway stopped: {map_discord_error(exc)}")
        else:
            if not self._stopping:
                self.status.set("error", "the Discord gateway connection ended")

    async def start_receiving(self) -> None:
        """This instance holds the cluster's Discord lease: connect the gateway (READY backfills what
        arrived while nobody held it)."""
        if self._client is None or self._stopping or (self._runner is not None and not self._runner.done()):
            return
        self._paused = False
        self._ready.clear()
        self.status.set("starting", "connecting the gateway")
        self._runner = asyncio.create_task(self._receive(self._client), name="discord-gateway")

    async def _receive(self, client: discord.Client) -> None:
        """Pick up where the previous holder left off: its cursors (the channels it followed, how far
        it got) are in the shared table, so load them again before READY's backfill reads from them."""
        await self.cursors.stop()
        await self.cursors.start()
        await self._connect(client)

    async def stop_receiving(self) -> None:
        """The lease moved on: hand nothing more to the inbox and close the gateway session (REST
        replies keep working). What arrives meanwhile is the new holder's, or its backfill's."""
        self._paused = True
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()  # first, so discord.py does not reconnect after the close below
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
        if self._backfill_task is not None:
            self._backfill_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._backfill_task
            self._backfill_task = None
        client = self._client
        if client is not None and client.ws is not None and client.ws.open:
            with contextlib.suppress(Exception):
                await client.ws.close(code=1000)
        if client is not None:
            self.status.set(
                "connected", f"as {client.user}, replies only (another instance holds the gateway)"
            )

    @property
    def _holding_off(self) -> bool:
        """Not handing messages to the inbox: paused, or the lease window shut (its end passed before the
        keeper closed the session). What arrives meanwhile is left to the next holder's backfill."""
        window = self.intake_window
        return self._paused or (window is not None and not window.open)

    def receiving(self) -> tuple[bool, str]:
        """Receiving while the gateway session is ready and (under a lease) the lease window is open."""
        window = self.intake_window
        if window is not None and not window.open:
            return False, window.why_shut()
        if self._paused:
            return False, "paused"
        if self.status.state != "connected" or not self._ready.is_set():
            return False, f"gateway {self.status.state}: {self.status.detail or 'no session'}"
        return True, ""

    async def pause(self) -> None:
        """Stop handing messages to the inbox; those arriving now are left for the next backfill."""
        self._paused = True

    async def stop(self) -> None:
        self._stopping = self._paused = True
        if self._backfill_task is not None:
            self._backfill_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._backfill_task
            self._backfill_task = None
        if self._commands_task is not None:
            self._commands_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._commands_task
            self._commands_task = None
        await self._close_client()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._runner
            self._runner = None
        try:
            await self.cursors.stop()  # the last cursor positions, written before the process ends
        except Exception as exc:
            log.warning("could not save Discord cursors at stop: %s", exc)
        if self.status.state != "error":
            self.status.set("stopped")

    async def _close_client(self) -> None:
        if self._client is not None and not self._client.is_closed():
            with contextlib.suppress(Exception):
                await self._client.close()

    def _on_ready(self, *, fresh_session: bool) -> None:
        user = self.client.user
        self.status.set("connected", f"as {user}" if user else None)
        self._ready.set()
        if fresh_session and self.config.slash_commands and self._commands_task is None:
            self._commands_task = asyncio.create_task(self._sync_commands(), name="discord-commands")
        if not fresh_session or self.config.backfill_minutes <= 0:
            self.cursors.release_all()  # a resumed session replays what it missed itself
        elif not self._holding_off:
            if self._backfill_task is not None:
                self._backfill_task.cancel()
            self._backfill_task = asyncio.create_task(self._backfill(), name="discord-backfill")

    async def _sync_commands(self) -> None:
        """Once per start: the service's commands as slash commands (see channels.discord.commands)."""
        await sync_commands(self.client, self.commands)
        self.commands_synced = True

    def _on_disconnect(self) -> None:
        self.cursors.hold_all()  # whatever arrives before the next session's backfill waits for it
        if not self._stopping and self._ready.is_set():
            self.status.set("reconnecting", "gateway connection lost; discord.py is resuming it")

    # --- inbound ---------------------------------------------------------------------------------
    async def _on_message(self, message: discord.Message) -> None:
        """Live and backfilled messages alike: hand to the inbox, then move the channel's cursor."""
        channel_id = str(message.channel.id)
        guild_id = message.guild.id if message.guild else getattr(message.channel, "guild_id", None)
        guild = str(guild_id) if guild_id else None
        if self._holding_off:
            self.cursors.left_open(channel_id, guild, message.id)
            return
        self.cursors.begin(channel_id, message.id)
        outcome: Outcome = "refused"
        try:
            inbound = await self.normalise(message)
            if inbound is not None:
                outcome = await self._deliver(inbound, channel_id, guild, message.id)
                if inbound.topic and inbound.topic != inbound.chat and inbound.topic != channel_id:
                    # The bot opened a thread for this mention: follow it from its first message on.
                    self.cursors.follow(inbound.topic, guild, after=message.id)
        except Exception:  # one bad event must never take the gateway listener down
            log.exception("handling a Discord message failed")
        if outcome == "left":
            self.cursors.left_open(channel_id, guild, message.id)
        else:
            self.cursors.handled(channel_id, guild, message.id, stored=outcome == "stored")

    async def _backfill(self) -> None:
        """Read what followed channels received while no session was open (see the module doc)."""
        since = datetime.now(UTC) - timedelta(minutes=self.config.backfill_minutes)
        window_start = discord.utils.time_snowflake(since, high=True)
        read = 0
        for channel_id in self.cursors.followed():
            if self._holding_off:
                return
            after = max(self.cursors.floor(channel_id), window_start)
            try:
                channel = await self._resolve(int(channel_id))
                if not self._may_read_history(channel):
                    # Discord answers such a read with an empty page, not an error: say it in words.
                    log.warning(
                        "Discord backfill skips channel %s: the bot lacks the Read Message History "
                        "permission there, so messages sent while it was away cannot be read",
                        channel_id,
                    )
                    self.cursors.release(channel_id)
                    continue
                history = channel.history(
                    after=discord.Object(after), limit=BACKFILL_MAX_MESSAGES, oldest_first=True
                )
                async for message in history:
                    if self._holding_off:
                        break
                    read += 1
                    self.backfilled += 1
                    await self._on_message(message)
            except asyncio.CancelledError:
                raise
            except (discord.Forbidden, discord.NotFound) as exc:  # no access any more, or deleted
                log.warning("Discord backfill skips channel %s: %s", channel_id, map_discord_error(exc))
                self.cursors.release(channel_id)
            except Exception as exc:  # transient: keep the cursor pinned, the next session reads again
                log.warning("Discord backfill of channel %s failed: %s", channel_id, map_discord_error(exc))
            else:
                self.cursors.release(channel_id)
        if read:
            log.info("Discord backfill: read %d message(s) sent while the bot was away", read)

    @staticmethod
    def _may_read_history(channel: object) -> bool:
        """Whether the bot's permissions in a server channel or thread include Read Message History.

        Without it Get Channel Messages answers an empty list (no error), so the backfill must ask
        first. A DM, or a server whose member list discord.py does not hold yet, is assumed readable.
        """
        if not isinstance(channel, discord.abc.GuildChannel | discord.Thread):
            return True
        me = channel.guild.me
        return me is None or channel.permissions_for(me).read_message_history

    async def _resolve(self, channel_id: int) -> Any:
        """A channel object with ``history()``: from discord.py's cache, else fetched (DMs after a restart)."""
        channel = self.client.get_channel(channel_id)
        if channel is None:
            channel = await self.client.fetch_channel(channel_id)
        return channel

    async def normalise(self, message: discord.Message) -> InboundMessage | None:
        """Turn a gateway message into an :class:`InboundMessage`, or None when the bot should not look at it.

        This is also where a mention in a channel opens the thread that becomes the conversation, because
        the reply must have somewhere to go before the manager starts answering.
        """
        me = self.client.user
        if me is None or message.author.id == me.id or message.author.bot:
            return None
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return None  # joins, pins, "thread created" notices …
        mentioned = any(user.id == me.id for user in message.mentions)
        text = self._strip_mention(message.content)
        channel = message.channel
        context: dict[str, Any] = {}
        # A server message whose server is not (yet) in discord.py's cache still carries its guild id.
        guild_id = message.guild.id if message.guild else getattr(channel, "guild_id", None)
        if guild_id is None:
            workspace, chat, topic = "", str(channel.id), None
            context["reply_channel"] = str(channel.id)
        else:
            workspace = str(guild_id)
            if isinstance(channel, discord.Thread) and self._is_bot_thread(channel):
                chat, topic = str(channel.parent_id), str(channel.id)
            elif channel.id in self._bot_threads:  # our thread, missing from discord.py's cache
                chat, topic = str(self._bot_threads[channel.id]), str(channel.id)
            elif isinstance(channel, discord.Thread):
                if self.config.mention_only and not mentioned:
                    self._overheard(message, workspace, str(channel.parent_id), text)
                    return None
                chat, topic = str(channel.parent_id), str(channel.id)
            elif self.config.mention_only and not mentioned:
                self._overheard(message, workspace, str(channel.id), text)
                return None
            elif mentioned and message.guild is not None and self._guild_allowed(workspace):
                chat = str(channel.id)
                thread_id = await self._open_thread(message, text)
                topic = str(thread_id) if thread_id else None
            else:
                chat, topic = str(channel.id), None
            context["reply_channel"] = topic or chat
            if topic is None:
                context["reference"] = str(message.id)
            if isinstance(message.author, discord.Member):  # for agent bindings by role (docs/agents.md)
                context["roles"] = [str(role.id) for role in message.author.roles]
        return InboundMessage(
            provider=self.provider,
            workspace=workspace,
            chat=chat,
            topic=topic,
            sender=Sender(
                id=str(message.author.id),
                name=message.author.display_name,
                is_bot=message.author.bot,
                member=self.vouches_for(workspace if guild_id is not None else None, message.author),
            ),
            text=text,
            platform_message_id=str(message.id),
            mentioned=mentioned,
            is_private=guild_id is None,
            files=[self._inbound_file(a) for a in message.attachments],
            context=context,
        )

    def _overheard(self, message: discord.Message, workspace: str, chat: str, text: str) -> None:
        """A server message not for the bot: not answered, only offered to the room window (docs/agents.md)."""
        if self.overhear is not None and text.strip():
            self.overhear(
                InboundMessage(
                    provider=self.provider,
                    workspace=workspace,
                    chat=chat,
                    sender=Sender(id=str(message.author.id), name=message.author.display_name),
                    text=text,
                    platform_message_id=str(message.id),
                )
            )

    def _strip_mention(self, content: str) -> str:
        """Remove the bot's own ``<@id>``/``<@!id>`` so ``@bot /new`` reads as the command ``/new``."""
        me = self.client.user
        if me is None:
            return content.strip()
        return re.sub(r"[ \t]{2,}", " ", re.sub(rf"<@!?{me.id}>", "", content)).strip()

    def _is_bot_thread(self, thread: discord.Thread) -> bool:
        me = self.client.user
        return thread.id in self._bot_threads or (me is not None and thread.owner_id == me.id)

    def _remember_thread(self, thread_id: int, parent_id: int) -> None:
        self._bot_threads[thread_id] = parent_id
        self._bot_threads.move_to_end(thread_id)
        while len(self._bot_threads) > _REMEMBERED:
            self._bot_threads.popitem(last=False)

    async def _open_thread(self, message: discord.Message, text: str) -> int | None:
        """Start a thread from the mentioning message; None (answer in the channel) when not permitted."""
        name = (text.splitlines()[0] if text else "") or f"Chat with {self.client.user.display_name}"  # type: ignore[union-attr]
        if len(name) > THREAD_NAME_LIMIT:
            name = name[: THREAD_NAME_LIMIT - 1] + "…"
        try:
            with discord_errors():
                thread = await message.create_thread(name=name)
        except ChannelError as exc:
            cause = exc.__cause__
            if isinstance(cause, discord.HTTPException) and cause.code == THREAD_ALREADY_EXISTS:
                # A redelivered mention: Discord gives a message's thread the message's own id.
                self._remember_thread(message.id, message.channel.id)
                return message.id
            log.info("could not open a thread, answering in the channel: %s", exc)
            return None
        self._remember_thread(thread.id, message.channel.id)
        return thread.id

    @staticmethod
    def _inbound_file(attachment: discord.Attachment) -> InboundFile:
        # A voice message (Ogg/Opus, ``duration_secs``) or a shared audio file: the service transcribes it.
        audio = attachment.is_voice_message() or (attachment.content_type or "").startswith("audio/")
        return InboundFile(
            name=attachment.filename,
            ref=attachment.url,
            size=attachment.size,
            mime=attachment.content_type,
            audio=audio,
            duration=attachment.duration if audio else None,
        )

    async def _deliver(
        self, inbound: InboundMessage, channel_id: str, guild: str | None, message_id: int
    ) -> Outcome:
        """Hand the message to the inbox; on a full inbox wait for room (a gateway event is not resent).

        While the service stops, a refused message is left for the next start's backfill instead, and so
        is one the inbox failed to store. From the first refusal on the message is marked open in its
        channel's cursor, so even if this wait is cut short (the process ends) the next start reads it.
        """
        assert self._sink is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BACKPRESSURE_WAIT_SECONDS
        delay = 0.25
        while True:
            if self._holding_off:
                return "left"
            try:
                accepted = await self._sink(inbound)
            except Backpressure:
                self.cursors.left_open(channel_id, guild, message_id)
                if self._holding_off:
                    return "left"
                if loop.time() + delay > deadline:
                    log.warning("inbox still full; telling the sender to try again")
                    with contextlib.suppress(ChannelError):
                        await self.open_reply(inbound).finish(BUSY_NOTICE)
                    return "refused"
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKPRESSURE_MAX_POLL)
                continue
            except Exception as exc:  # the inbox could not store it (database trouble): read it again later
                log.warning(
                    "storing Discord message %s failed (%s); the next backfill retries it", message_id, exc
                )
                self.cursors.left_open(channel_id, guild, message_id)
                return "left"
            if accepted:
                await self.reply_transport(inbound).typing()
            return "stored"

    # --- policy ----------------------------------------------------------------------------------
    def _guild_allowed(self, workspace: str) -> bool:
        return not self.config.allowed_guilds or workspace in self.config.allowed_guilds

    # --- what the transport and interactions use (channels/discord/host.py) ------------------------
    def guild_allowed(self, workspace: str) -> bool:
        return self._guild_allowed(workspace)

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def sink(self) -> InboundSink | None:
        return self._sink

    def thread_parent(self, channel_id: int) -> int | None:
        return self._bot_threads.get(channel_id)

    def vouches_for(self, guild: str | None, author: discord.User | discord.Member) -> bool:
        """A member of a server the operator listed in ``allowed_guilds`` counts as a workspace member;
        with no list (any server may add the bot, many are public) nobody does, and DMs never. In any
        server the bot is allowed in, so does a holder of one of ``member_roles``: discord.py builds the
        author as a ``Member`` from the event's ``member`` field and resolves its role ids against the
        roles GUILD_CREATE cached (role ids are unique across servers, so a role cannot be borrowed)."""
        if guild is None or not self._guild_allowed(guild):
            return False
        if guild in self.config.allowed_guilds:
            return True
        if not self.config.member_roles or not isinstance(author, discord.Member):
            return False
        return any(str(role.id) in self.config.member_roles for role in author.roles)

    def is_allowed(self, message: InboundMessage) -> bool:
        """DMs always; server messages only from ``allowed_guilds`` (empty = every server)."""
        return message.is_private or self._guild_allowed(message.workspace)

    # --- replies and files -----------------------------------------------------------------------
    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        live = self.interactions.live(message)
        if live is not None:
            return InteractionTransport(self, message, live, private=False)
        return DiscordTransport(self, message)

    def private_transport(self, message: InboundMessage) -> ReplyTransport | None:
        """Ephemeral, which Discord only has for interactions (slash commands, button presses); a typed
        command gets None.

        For an interaction that is over, the sender's DMs instead (never the channel).
        """
        key = next((k for k in ("interaction", "press") if message.context.get(k)), None)
        if key is None:
            return None
        live = self.interactions.live(message, key)
        if live is None and message.is_private:
            return None  # the conversation already is the sender's DM
        return InteractionTransport(self, message, live, private=True)

    def budget_key(self, message: InboundMessage) -> str:
        """Discord paces messages per channel (a thread is its own channel); an interaction's messages
        go through its own webhook, which Discord limits apart from the channel."""
        live = self.interactions.live(message)
        if live is not None:
            return f"interaction/{live.id}"
        return f"channel/{message.context.get('reply_channel') or message.topic or message.chat}"

    async def _download(self, file: InboundFile, max_bytes: int) -> bytes:
        """Fetch an attachment over discord.py's own HTTP session (same proxy and connector settings)."""
        with discord_errors():
            return await self.client.http.get_from_cdn(file.ref)

    # --- doctor ----------------------------------------------------------------------------------
    async def check(self) -> str | None:
        """Ask Discord who the token belongs to, and whether the app may read message text."""
        if not self.config.bot_token:
            return "channels.discord.bot_token is not set"
        base = self.config.api_base_url.rstrip("/")
        headers = {"Authorization": f"Bot {self.config.bot_token}"}
        timeout = aiohttp.ClientTimeout(total=10)
        try:
            async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
                async with session.get(f"{base}/users/@me") as response:
                    if response.status == 401:
                        return "Discord rejected the bot token (401); reset it under Developer Portal → Bot"
                    if response.status >= 400:
                        return f"Discord answered {response.status} to /users/@me at {base}"
                async with session.get(f"{base}/applications/@me") as response:
                    if response.status == 200:
                        flags = int((await response.json(content_type=None)).get("flags") or 0)
                        if not flags & APP_FLAG_MESSAGE_CONTENT:
                            return (
                                "the Message Content intent is off: Developer Portal → Bot → "
                                "Privileged Gateway Intents → Message Content Intent"
                            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return f"cannot reach Discord at {base} ({type(exc).__name__})"
        return None
