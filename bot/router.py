"""The router: what an accepted message is, and where it goes.

For every message the bus hands over it resolves the sender's identity, applies the gates in order —
``/connect`` codes first, the channel's allow-list, the bound-identity rule, the trust level (guests get
what the policy gives them) — and then runs a command, or queues a turn (a skill's or an ordinary one)
in the conversation's lane. A conversation's messages are routed one at a time, in arrival order, and a
message whose handling failed (storage briefly away) is tried again after a growing delay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from agent.events import Agent, TrustLevel
from bot import tracing
from bot.bus import MessageBus
from bot.commands import Command, CommandContext, CommandHost, CommandRegistry, parse_command
from bot.faults import StorageRetry
from bot.identity import Identity, IdentityResolver
from bot.inbox import FAILED, InboxEntry
from bot.logs import trace_id_var
from bot.schedules import is_occurrence
from bot.settle import Settler
from bot.speech.hearing import Hearing, TranscriberUnavailableError
from bot.trust import GUEST_COMMAND, TrustPolicy, as_level, lowest
from bot.turns import SubmitTurn, TurnAsk
from channels.base import Channel
from channels.types import InboundMessage
from config.schema import Settings

log = logging.getLogger(__name__)

#: Messages routed at once (identity, command, conversation lookup). A burst of 10k new chats waits here
#: instead of in the connection pool, whose 30 s timeout failed them. Routing holds a connection only
#: for short reads and shares one per batch of new conversations, so the pool can be smaller than this.
ROUTE_CONCURRENCY = 64
#: Connections for routing and background work, on top of one per running turn (bot/service.py).
ROUTE_CONNECTIONS = 16
#: In-process retry of a message whose handling failed (e.g. the database briefly unreachable):
#: after 1, 2, 4 … seconds, up to this, until ``bus.max_attempts`` sets it aside.
RETRY_MAX_DELAY_SECONDS = 30.0

CONNECT_HINT = (
    "This bot only answers people who have connected their account. Open {url}/connect, "
    "get a code, and send /connect CODE here."
)


class Router:
    """Takes each accepted message through identity, the gates and commands to a turn in its lane."""

    def __init__(
        self,
        *,
        settings: Settings,
        bus: MessageBus,
        channels: Mapping[str, Channel],
        agent: Agent,
        commands: CommandRegistry,
        identity: IdentityResolver,
        trust: TrustPolicy,
        storage: StorageRetry,
        settler: Settler,
        submit: SubmitTurn,
        stopping: Callable[[], bool],
        host: CommandHost,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.channels = channels
        self.agent = agent
        self.commands = commands
        self.identity = identity
        self.trust = trust
        self.storage = storage
        self.submit_turn = submit
        self.stopping = stopping
        #: What commands see of the service (the manager).
        self.host = host
        self.send_notice = settler.send_notice
        self._complete = settler.complete
        self._fail = settler.fail
        # Per-conversation lock + number of handlers using it, so it is dropped only when nobody waits.
        self._conversation_locks: dict[tuple[str, str, str, str], tuple[asyncio.Lock, int]] = {}
        self._route_slots = asyncio.Semaphore(ROUTE_CONCURRENCY)
        #: Voice messages written down before the message is read (bot/speech/hearing.py).
        self.hearing = Hearing(settings.speech, self.send_notice, lambda name: commands.get(name) is not None)

    async def level_now(self, message: InboundMessage, channel: Channel) -> TrustLevel:
        """The sender's level now: their identity resolved again, then the trust policy."""
        identity = await self.identity.resolve(message)
        return await self.trust.level(message, channel, identity)

    def is_command(self, message: InboundMessage) -> bool:
        """A chat command the manager answers itself (not a skill turn): it does not wait for a turn."""
        if is_occurrence(message):  # a scheduled occurrence is never a command (bot/schedules.py)
            return False
        parsed = parse_command(message.text)
        return parsed is not None and self.commands.get(parsed.name) is not None

    async def handle(self, entry: InboxEntry) -> None:
        message = entry.message
        token = trace_id_var.set(tracing.trace_id_of(message) or entry.id)  # the id stored at accept
        key = message.conversation_key
        lock, users = self._conversation_locks.get(key, (asyncio.Lock(), 0))
        self._conversation_locks[key] = (lock, users + 1)
        try:
            # The lock keeps a conversation's messages in arrival order up to their lane.
            async with lock, self._route_slots:
                with tracing.span("route", message):
                    await self.storage.call("routing a message", lambda: self._route(entry))
        except asyncio.CancelledError:
            self.bus.release(entry.id)
            raise
        except Exception as exc:
            if isinstance(exc, TranscriberUnavailableError):  # expected: said once, tried again below
                log.warning("handling message failed: transcriber unavailable (%s)", exc)
            else:
                log.exception("handling message failed")
            status = await self._fail(
                entry.id, f"{type(exc).__name__}: {exc}", message=message, shown=entry.reply_ref
            )
            if status == FAILED and not self.stopping():  # transient (a busy database): try again soon
                delay = min(RETRY_MAX_DELAY_SECONDS, 2.0**entry.attempts)
                entry.attempts += 1
                self.bus.redeliver_later(entry, delay)
        finally:
            lock, users = self._conversation_locks[key]
            if users <= 1:
                del self._conversation_locks[key]
            else:
                self._conversation_locks[key] = (lock, users - 1)
            trace_id_var.reset(token)

    async def _route(self, entry: InboxEntry) -> None:
        message = entry.message
        channel = self.channels.get(message.provider)
        if channel is None:
            raise LookupError(f"no channel running for provider {message.provider!r}")
        identity = await self.identity.resolve(message)
        # A scheduled occurrence is text stored earlier (maybe by the model): never read as a command.
        scheduled = is_occurrence(message)
        parsed = None if scheduled else parse_command(message.text)
        command = self.commands.get(parsed.name) if parsed else None

        # A code gets past every gate; a bare /start (every Telegram chat's first message) does not, so
        # a stranger gets what the trust policy gives guests (a pairing code) rather than a connect hint.
        if command is not None and command.before_gate and parsed is not None and parsed.args:
            await self._run_command(entry, identity, command, parsed.args if parsed else "")
            return
        if not channel.is_allowed(message):
            log.info("ignoring message from a sender not on the allow-list")
            if message.is_private:
                await self.send_notice(message, "Sorry, you're not allowed to use this bot.")
            await self._complete(entry.id)
            return
        if self.settings.connections.require_bound_identity and not identity.bound:
            await self.send_notice(
                message, CONNECT_HINT.format(url=self.settings.server.public_url.rstrip("/"))
            )
            await self._complete(entry.id)
            return
        if self.hearing.applies(message):  # a spoken "/new" is the command /new from here on
            heard = await self.hearing.hear(message, channel, first_attempt=entry.attempts == 0)
            if heard.empty:
                await self._complete(entry.id, note="voice message with nothing to answer")
                return
            parsed = None if scheduled else parse_command(message.text)
            command = self.commands.get(parsed.name) if parsed else None
        level = await self.trust.level(message, channel, identity)
        if scheduled:  # never above its creator's level when it was made (nor, above, their level now)
            level = lowest(level, as_level(message.scheduled or "member"))
        if level == "guest":
            refusal = await self.trust.refuse_guest(message, channel, now=time.time(), automated=scheduled)
            if refusal is None and command is not None and not command.guests:
                refusal_note = GUEST_COMMAND.format(name=command.name)
                await self.send_notice(message, refusal_note, private=True)
                await self._complete(entry.id, note="a guest asked for a members' command")
                return
            if refusal is not None:
                if refusal.notice:
                    await self.send_notice(message, refusal.notice)
                await self._complete(entry.id, note=refusal.reason)
                return
        if parsed is not None and command is None and parsed.name in self.agent.skill_names():
            # /release-notes … : an ordinary turn, with that skill's instructions in its prompt.
            await self.submit_turn(
                message,
                identity,
                TurnAsk(
                    text=parsed.args or f"Use the {parsed.name} skill.",
                    entry_id=entry.id,
                    resume=entry.resume,
                    reply_text=entry.reply_text,
                    system_prompt=channel.system_prompt(message),
                    skill=parsed.name,
                    trust=level,
                ),
            )
            return
        if parsed is not None and command is None:
            await self.send_notice(
                message, f"Unknown command /{parsed.name}. Send /help to see what I understand."
            )
            await self._complete(entry.id)
            return
        if command is not None:
            await self._run_command(entry, identity, command, parsed.args if parsed else "", level)
            return
        await self.submit_turn(
            message,
            identity,
            TurnAsk(
                text=message.text,
                entry_id=entry.id,
                resume=entry.resume,
                reply_text=entry.reply_text,
                system_prompt=channel.system_prompt(message),
                trust=level,
            ),
        )

    async def _run_command(
        self, entry: InboxEntry, identity: Identity, command: Command, args: str, trust: TrustLevel = "guest"
    ) -> None:
        ctx = CommandContext(
            host=self.host,
            message=entry.message,
            identity=identity,
            args=args,
            entry_id=entry.id,
            private=command.private,
            trust=trust,
        )
        await command.handler(ctx)
        if ctx.entry_id is not None:  # the command did not hand the entry to a turn
            await self._complete(entry.id)
