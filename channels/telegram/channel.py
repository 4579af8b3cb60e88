"""Telegram, on python-telegram-bot 22 with long polling or a webhook (``channels.telegram.mode``).

What users get:

* a private chat is one conversation; in groups the bot answers only when @mentioned, when someone
  replies to one of its messages, or for a command (``/cmd`` or ``/cmd@thisbot``; ``/cmd@otherbot`` is
  somebody else's). In groups every reply chain is its own conversation (rooted at the first message),
  and in forum supergroups every topic is one;
* the reply appears as one message edited in place (pacing, splitting at 4096 characters and retries are
  the shared :class:`~channels.reply.ReplyStream`'s job; this module only sets the per-chat budget);
* documents, photos, audio and video up to ``max_file_bytes`` (Bot API cap: 20 MB) reach the agent;
  voice notes and audio files are marked as audio, for the service to transcribe (docs/voice.md);
* buttons (Stop while an answer streams, Approve / Deny on approval requests) are inline keyboards, and a
  press comes back as a ``callback_query`` (:mod:`channels.telegram.presses`) stored like a message.

Operational choices, and why:

* Store, then confirm. Polling is our own loop over ``Bot.get_updates`` (:mod:`channels.telegram.polling`):
  the next ``offset`` — Telegram's only confirmation — is sent only after every update below it is in the
  durable inbox. When the service pushes back (inbox full) the loop retries the same update and does not
  fetch more, so Telegram keeps holding the rest, unconfirmed, instead of us holding them in memory.
* Webhook mode (:mod:`channels.telegram.webhook`) registers ``setWebhook`` with a secret at start and
  stores what the route hands it before the request is answered 200; it never polls, and it leaves the
  webhook in place at stop for the other instances. Polling mode deletes any webhook at start, since
  Telegram refuses ``getUpdates`` while one is set.
* A 409 Conflict means another process polls with the same token. Polling is paused (status ``error``
  with a sentence saying so) and retried after a long, doubling delay instead of fighting the other one.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import logging
import re
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import telegram.error as tg_errors
from telegram import Bot, BotCommand, CallbackQuery, Message, MessageEntity, Update
from telegram.constants import ChatType
from telegram.request import HTTPXRequest

from channels.base import Channel, InboundSink
from channels.errors import ChannelError, FileTooLarge
from channels.reply import BudgetRegistry, CallKind, RateBudget, ReplyStream, StateSink
from channels.resume import ReplyState
from channels.telegram.polling import (
    CONFLICT_RETRY_SECONDS,
    LEASED_CONFLICT_RETRY_SECONDS,
    READ_TIMEOUT_MARGIN,
    UpdatePoller,
)
from channels.telegram.presses import answer as answer_press
from channels.telegram.presses import press_message
from channels.telegram.transport import TelegramTransport, map_error
from channels.telegram.webhook import WebhookIntake, registered_url, webhook_problem
from channels.types import Action, InboundFile, InboundMessage, ReplyLimits, Sender
from config.channels.telegram import TelegramConfig

log = logging.getLogger(__name__)

#: Telegram's longest message, counted after entity parsing.
TEXT_LIMIT = 4096
#: How long stop() lets a final reply already on its way (``finish`` running, e.g. waiting out a 429)
#: land before closing the HTTP client. Only those: a live task card is not waited for (see
#: :class:`_FinishingReply`).
STOP_REPLY_GRACE = 5.0
#: setMyCommands: names are 1-32 of a-z, 0-9 and _; descriptions 1-256 characters; at most 100 commands.
COMMAND_NAME = re.compile(r"^[a-z0-9_]{1,32}$")
COMMAND_DESCRIPTION_LIMIT = 256
MAX_COMMANDS = 100
#: Group reply-chain roots remembered per process (message → conversation).
MAX_CHAIN_ENTRIES = 20_000
#: Bot FAQ: a bot cannot send more than about 30 messages per second overall.
BOT_MESSAGES_PER_SECOND = 30
#: A group's cap (Bot FAQ: no more than 20 messages per minute in one group) as a bucket: 3 calls of
#: burst (placeholder and first words at once, one kept back) and one more per group interval.
GROUP_BURST = 3
#: Calls of the group's burst only a final answer may take, so it never waits behind a paced edit.
GROUP_FINAL_RESERVE = 1

_MEDIA_ATTRIBUTES = ("document", "audio", "video", "voice", "animation", "video_note")
#: Voice notes and audio files: the Bot API's ``Voice`` and ``Audio`` objects, both with a ``duration``.
_SPOKEN_ATTRIBUTES = frozenset({"voice", "audio"})


def _seconds(duration: int | dt.timedelta | None) -> float | None:
    """A media ``duration``: seconds as an int, or a timedelta (python-telegram-bot 22's newer form)."""
    if isinstance(duration, dt.timedelta):
        return duration.total_seconds()
    return float(duration) if duration is not None else None


class _FinishingReply(ReplyStream):
    """A reply that says when its final text is on its way, so :meth:`TelegramChannel.stop` waits for
    that (up to :data:`STOP_REPLY_GRACE`) and for nothing else.

    Why not wait for every reply not finished yet, as before: a task card (bot/tasks/card.py) stays open
    while its job runs, which can outlast any shutdown, and a card still running at stop is continued
    after the restart from its stored state — holding the stop for it only cost 5 s. A streaming answer
    whose turn the shutdown's drain cancelled will not finish either. ``finishing`` is set only while
    :meth:`finish` runs (reset however it ends, a cancellation included).
    """

    finishing = False

    async def finish(self, text: str, files: Sequence[Path] = (), actions: Sequence[Action] = ()) -> None:
        self.finishing = True
        try:
            await super().finish(text, files, actions)
        finally:
            self.finishing = False


class TelegramChannel(Channel):
    provider = "telegram"
    limits = ReplyLimits(text_limit=TEXT_LIMIT, min_edit_interval=1.0)

    def __init__(self, config: TelegramConfig, *, settings: Any = None) -> None:
        if not config.bot_token:
            raise ValueError("channels.telegram.bot_token is required (the token @BotFather gave you)")
        self.config = config
        self.settings = settings
        # Instance limits so the configured private-chat spacing feeds the base class's budgets.
        self.limits = ReplyLimits(text_limit=TEXT_LIMIT, min_edit_interval=config.edit_interval_seconds)  # type: ignore[misc]
        super().__init__()
        self.admins = frozenset(config.admins)
        self.trust = config.trust
        # Long polling runs once per bot token (a second getUpdates gets 409); a webhook reaches anyone.
        self.receives_exclusively = config.mode == "polling"
        # Every chat (private or group) is paced by the base class's per-chat budget (about 1 call/s);
        # a group's calls also draw on its cap, and message calls on the bot-wide cap.
        self._group_budgets = BudgetRegistry(
            config.group_edit_interval_seconds, burst=GROUP_BURST, reserve=GROUP_FINAL_RESERVE
        )
        # A flood wait in one chat says nothing about the others: a RetryAfter never holds the whole bot.
        self._bot_budget = RateBudget(
            1 / BOT_MESSAGES_PER_SECOND, BOT_MESSAGES_PER_SECOND, held_by_retry_after=False
        )
        self._allowed = {_normalise_user(u) for u in config.allowed_users if _normalise_user(u)}
        self._bot: Bot | None = None
        self._poller: UpdatePoller | None = None
        self._webhook: WebhookIntake | None = None
        self.bot_id: int | None = None
        self.bot_username: str | None = (config.bot_username or "").lstrip("@") or None
        self._chain_roots: OrderedDict[tuple[int, int], str] = OrderedDict()
        self._replies: weakref.WeakSet[_FinishingReply] = weakref.WeakSet()
        self._draft_ids = itertools.count(1)

    # --- lifecycle ---------------------------------------------------------------------------------
    @property
    def bot(self) -> Bot:
        if self._bot is None:
            raise ChannelError("the Telegram channel is not running")
        return self._bot

    def _root(self) -> str:
        return self.config.api_base_url.rstrip("/")

    def _build_bot(self) -> Bot:
        poll_timeout = self.config.poll_timeout_seconds
        return Bot(
            self.config.bot_token or "",
            base_url=f"{self._root()}/bot",
            base_file_url=f"{self._root()}/file/bot",
            request=HTTPXRequest(
                connection_pool_size=32, read_timeout=20, write_timeout=30, connect_timeout=10
            ),
            get_updates_request=HTTPXRequest(
                read_timeout=poll_timeout + READ_TIMEOUT_MARGIN, connect_timeout=10
            ),
        )

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self.status.set("starting", "connecting to the Telegram Bot API")
        webhook = self.config.mode == "webhook"
        url = registered_url(self.config, self.settings) if webhook else None
        if webhook and (not url or not self.config.webhook_secret):
            raise ChannelError(
                "channels.telegram.mode is webhook: set channels.telegram.webhook_secret and "
                "server.public_url (or channels.telegram.webhook_url)"
            )
        bot = self._build_bot()
        try:
            await bot.initialize()  # getMe: proves the token
            if not webhook:
                # Long polling and a webhook exclude each other (getUpdates answers 409 while one is
                # set), so polling mode removes a webhook left by webhook mode or another tool.
                await bot.delete_webhook()
        except tg_errors.InvalidToken:
            with contextlib.suppress(Exception):
                await bot.shutdown()
            raise ChannelError(
                "Telegram rejected bot_token (getMe failed); copy it again from @BotFather"
            ) from None
        except tg_errors.TelegramError as exc:
            with contextlib.suppress(Exception):
                await bot.shutdown()
            raise ChannelError(
                f"cannot reach the Telegram Bot API at {self._root()}: {map_error(exc)}"
            ) from None
        self._bot = bot
        self.bot_id = bot.id
        actual = bot.username
        if self.bot_username and actual and self.bot_username.lower() != actual.lower():
            log.warning(
                "channels.telegram.bot_username is @%s but the token belongs to @%s",
                self.bot_username,
                actual,
            )
        self.bot_username = actual or self.bot_username
        self._note_privacy(bot.bot.can_read_all_group_messages)
        await self._register_commands(bot)
        if webhook:
            assert url is not None and self.config.webhook_secret is not None
            intake = WebhookIntake(bot, self._store_update)
            try:
                await intake.register(url, self.config.webhook_secret)
            except ChannelError:
                self._bot = None
                with contextlib.suppress(Exception):
                    await bot.shutdown()
                raise
            self._webhook = intake
            self.status.set("connected", f"@{self.bot_username}, webhook {url}")
            return
        self._poller = UpdatePoller(
            bot,
            self._store_update,
            self.status,
            poll_timeout=self.config.poll_timeout_seconds,
            connected_detail=lambda: f"@{self.bot_username}, long polling",
            conflict_retry=LEASED_CONFLICT_RETRY_SECONDS if self.intake_leased else CONFLICT_RETRY_SECONDS,
            window=self.intake_window,
        )
        if self.intake_leased:  # replies from here; polling once this instance holds the lease
            self.status.set("connected", self._standby_detail())
            return
        self.status.set("connected", f"@{self.bot_username}, long polling")
        self._poller.start()

    def _standby_detail(self) -> str:
        return f"@{self.bot_username}, replies only (another instance holds long polling)"

    async def start_receiving(self) -> None:
        """This instance holds the cluster's Telegram lease: long polling starts here (or resumes: the
        loop waits while the lease window is shut, and is started again if it ended)."""
        poller = self._poller
        if poller is not None:
            self.status.set("connected", f"@{self.bot_username}, long polling")
            if not poller.running:
                poller.start()

    async def stop_receiving(self) -> None:
        """The lease moved on (its window is already shut, so no further getUpdates leaves here): end
        the running long poll now. What was fetched is still stored (any instance may accept), but not
        confirmed: that call would cut the new holder's long poll short. Returns at once."""
        poller = self._poller
        if poller is not None:
            poller.interrupt()
            self.status.set("connected", self._standby_detail())

    def receiving(self) -> tuple[bool, str]:
        """Long polling receives while the lease (if any) is held, the last getUpdates succeeded and the
        service takes what it returned; webhook mode while the channel is connected."""
        poller = self._poller
        if poller is None:
            return super().receiving()
        window = self.intake_window
        if window is not None and not window.open:
            return False, window.why_shut()
        if not poller.running:
            return False, "polling stopped"
        if poller.problem is not None:
            return False, f"polls failing: {poller.problem}"
        if poller.holding is not None:
            return False, poller.holding
        return True, ""

    @property
    def webhook(self) -> WebhookIntake | None:
        """Webhook mode, while running: where the route hands verified updates. None otherwise."""
        return self._webhook

    async def _register_commands(self, bot: Bot) -> None:
        """``setMyCommands``: the "/" menu in every client lists what the service answers.

        A refusal is logged, not fatal: the commands work typed out either way.
        """
        menu: list[BotCommand] = []
        for command in self.commands:
            name = command.name.lower()
            if not COMMAND_NAME.match(name):
                log.info("/%s cannot be listed in Telegram's command menu (names are a-z, 0-9, _)", name)
                continue
            description = command.description.strip() or name
            menu.append(BotCommand(name, description[:COMMAND_DESCRIPTION_LIMIT]))
        if not menu:
            return
        try:
            await bot.set_my_commands(menu[:MAX_COMMANDS])
        except tg_errors.TelegramError as exc:
            log.warning("Telegram refused the command menu (setMyCommands): %s", map_error(exc))

    def next_draft_id(self) -> int:
        """A fresh non-zero draft id: each reply animates its own draft."""
        return next(self._draft_ids)

    async def pause(self) -> None:
        """Stop taking updates: polling stores what it fetched, then confirms it; a webhook answers 503
        from now on (Telegram repeats those later, or to another instance). Replies work until stop().

        The webhook itself stays registered at stop: other instances behind the same URL still serve it.
        """
        if self._webhook is not None:
            self._webhook.close()
        poller = self._poller
        if poller is not None and poller.running:
            await poller.pause(self.config.stop_store_grace_seconds)

    async def stop(self) -> None:
        await self.pause()
        self._poller = None
        self._webhook = None
        if self._bot is not None:
            # The client stays reachable meanwhile: a final reply's next try goes through ``self.bot``.
            await self._wait_for_replies()
        bot, self._bot = self._bot, None
        if bot is not None:
            try:
                await bot.shutdown()
            except Exception as exc:
                log.warning("Telegram channel did not stop cleanly: %s", exc)
            self._bot = None
        self.status.set("stopped")

    async def _wait_for_replies(self) -> None:
        """Final replies being delivered when stop() is called still need the HTTP client; give them a
        moment. Replies that are merely open (live cards, queued notices) are not waited for."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_REPLY_GRACE
        # Polling is fine here: replies are weakly held and may vanish without a signal.
        while any(r.finishing for r in list(self._replies)) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    # --- inbound -----------------------------------------------------------------------------------
    async def _store_update(self, update: Update) -> None:
        """The poller's store step: returns once the message is in the inbox (or is not for us).

        Raises :class:`Backpressure` (or an inbox error) to make the poller retry this same update; a
        message that cannot be normalised is logged and skipped, so one odd update cannot stall polling.
        """
        if update.callback_query is not None:
            await self._store_press(update.callback_query)
            return
        message = update.message
        if message is None:
            return
        try:
            inbound = self.normalise(message)
        except Exception:
            log.exception("could not read Telegram update %s; skipping it", update.update_id)
            return
        if inbound is not None:
            assert self._sink is not None
            await self._sink(inbound)

    async def _store_press(self, query: CallbackQuery) -> None:
        """A button press: stored like a message, then answered (the presser's spinner stops).

        A refused store (Backpressure) raises before the answer, so the retried update is answered
        once it is in; a redelivered press is a duplicate to the inbox and is answered again (harmless).
        """
        try:
            inbound = press_message(self, query)
        except Exception:
            log.exception("could not read Telegram button press %s; skipping it", query.id)
            inbound = None
        if inbound is not None:
            assert self._sink is not None
            await self._sink(inbound)
        await answer_press(self, query)

    def normalise(self, message: Message) -> InboundMessage | None:
        """A Telegram message → :class:`InboundMessage`, or None when it is not for this bot."""
        user = message.from_user
        if user is None or user.is_bot:  # channel posts, our own and other bots' messages
            return None
        chat = message.chat
        private = chat.type == ChatType.PRIVATE
        if message.text is not None:
            text, entities = message.text, message.parse_entities()
        else:
            text, entities = message.caption or "", message.parse_caption_entities()
        addressed, text = self._addressing(message, text, entities)
        if not private and not addressed:
            if self.overhear is not None and text.strip():  # the room window (docs/agents.md)
                name = user.full_name or user.username
                self.overhear(
                    InboundMessage(
                        provider=self.provider,
                        workspace="",
                        chat=str(chat.id),
                        sender=Sender(id=str(user.id), name=name),
                        text=text,
                        platform_message_id=str(message.message_id),
                    )
                )
            return None
        files = self._files(message)
        if not text.strip() and not files:
            return None  # stickers, service messages, …
        context: dict[str, Any] = {"chat_type": chat.type}
        if user.username:
            context["username"] = user.username
        topic: str | None = None
        if not private:
            topic = self._topic_for(message)
            context["reply_to"] = message.message_id
        if message.is_topic_message and message.message_thread_id is not None:
            context["thread_id"] = message.message_thread_id
        return InboundMessage(
            provider=self.provider,
            workspace="",
            chat=str(chat.id),
            topic=topic,
            sender=Sender(id=str(user.id), name=user.full_name or user.username, is_bot=False),
            text=text,
            platform_message_id=str(message.message_id),
            mentioned=addressed,
            is_private=private,
            files=files,
            context=context,
        )

    def _addressing(
        self, message: Message, text: str, entities: dict[MessageEntity, str]
    ) -> tuple[bool, str]:
        """Is the message for this bot (mention, reply to the bot, command)? Also strips a leading mention."""
        me = (self.bot_username or "").lower()
        mentioned = False
        for entity, value in entities.items():
            if (entity.type == MessageEntity.MENTION and me and value.lower() == f"@{me}") or (
                entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == self.bot_id
            ):
                mentioned = True
            elif entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
                _, _, target = value.partition("@")
                if target and target.lower() != me:
                    return False, text  # /cmd@otherbot is for another bot
                mentioned = True
        if me:
            stripped = re.sub(rf"^\s*@{re.escape(me)}\b[\s,:]*", "", text, count=1, flags=re.IGNORECASE)
            if stripped != text:
                mentioned, text = True, stripped
        reply = message.reply_to_message
        to_bot = reply is not None and reply.from_user is not None and reply.from_user.id == self.bot_id
        # In forums every message "replies" to the topic's first message; that is not a reply.
        topic_root = (
            reply is not None and message.is_topic_message and reply.message_id == message.message_thread_id
        )
        if to_bot and not topic_root:
            mentioned = True
        return mentioned, text

    def _topic_for(self, message: Message) -> str:
        """Group conversations: the forum topic, else the reply chain (rooted at its first message)."""
        if message.is_topic_message and message.message_thread_id is not None:
            return f"topic:{message.message_thread_id}"
        chat_id = message.chat.id
        reply = message.reply_to_message
        if reply is not None:
            root = self._chain_roots.get((chat_id, reply.message_id)) or f"chain:{reply.message_id}"
        else:
            root = f"chain:{message.message_id}"
        self._remember(chat_id, message.message_id, root)
        return root

    def _remember(self, chat_id: int, message_id: int, topic: str) -> None:
        self._chain_roots[(chat_id, message_id)] = topic
        self._chain_roots.move_to_end((chat_id, message_id))
        while len(self._chain_roots) > MAX_CHAIN_ENTRIES:
            self._chain_roots.popitem(last=False)

    def chain_of(self, chat_id: int, message_id: int) -> str | None:
        """The reply chain a message of this process's memory belongs to, if it is remembered."""
        return self._chain_roots.get((chat_id, message_id))

    @property
    def bot_budget(self) -> RateBudget:
        """The bot-wide call budget (about 30 per second), shared by replies and press answers."""
        return self._bot_budget

    def remember_reply(self, chat_id: int, message_id: int, topic: str | None) -> None:
        """The transport reports each message the bot sent, so replying to it continues that chain."""
        if topic is not None and topic.startswith("chain:"):
            self._remember(chat_id, message_id, topic)

    def _files(self, message: Message) -> list[InboundFile]:
        files: list[InboundFile] = []
        if message.photo:
            photo = message.photo[-1]  # the largest size
            files.append(
                InboundFile(
                    name=f"photo_{message.message_id}.jpg",
                    ref=photo.file_id,
                    size=photo.file_size,
                    mime="image/jpeg",
                )
            )
        for attribute in _MEDIA_ATTRIBUTES:
            media = getattr(message, attribute, None)
            if media is None:
                continue
            name = getattr(media, "file_name", None) or f"{attribute}_{message.message_id}"
            spoken = attribute in _SPOKEN_ATTRIBUTES  # transcribed by the service (docs/voice.md)
            files.append(
                InboundFile(
                    name=name,
                    ref=media.file_id,
                    size=media.file_size,
                    mime=getattr(media, "mime_type", None),
                    audio=spoken,
                    duration=_seconds(media.duration) if spoken else None,
                )
            )
        return files

    async def _download(self, file: InboundFile, max_bytes: int) -> bytes:
        limit = min(max_bytes, self.config.max_file_bytes)
        if file.size is not None and file.size > limit:
            raise FileTooLarge(file.name, file.size, limit)
        try:
            remote = await self.bot.get_file(file.ref)
            if remote.file_size is not None and remote.file_size > limit:
                raise FileTooLarge(file.name, remote.file_size, limit)
            data = await remote.download_as_bytearray()
        except tg_errors.TelegramError as exc:
            raise map_error(exc) from exc
        if len(data) > limit:
            raise FileTooLarge(file.name, len(data), limit)
        return bytes(data)

    # --- replies and policy --------------------------------------------------------------------------
    sends_voice = True

    async def send_voice(self, message: InboundMessage, audio: bytes) -> None:
        """Voice out (docs/voice.md): a voice note in the chat, topic or reply chain of ``message``."""
        await TelegramTransport(self, message).send_voice(audio)

    def reply_transport(self, message: InboundMessage) -> TelegramTransport:
        return TelegramTransport(self, message)

    def shared_budgets(self, message: InboundMessage, kind: CallKind) -> tuple[RateBudget, ...]:
        """A group's every call also counts against its per-minute cap (edits too, and typing to be safe);
        messages and edits also against the bot's overall cap."""
        shared: tuple[RateBudget, ...] = ()
        if not message.is_private:
            shared = (self._group_budgets.for_chat(self.budget_key(message)),)
        if kind != "typing":
            shared += (self._bot_budget,)
        return shared

    def open_reply(
        self,
        message: InboundMessage,
        *,
        resume_ref: str | None = None,
        resume: ReplyState | None = None,
        on_change: StateSink | None = None,
        private: bool = False,
    ) -> ReplyStream:
        """Same as the base, but the transport paces its extra file uploads by the reply's budgets.

        Telegram has no message only one member of a group sees, so ``private`` changes nothing.
        """
        pacing = self.pacing(message)
        transport = self.reply_transport(message)
        transport.budget = pacing.of_kind("files")
        reply = _FinishingReply(
            transport,
            pacing,
            self.limits,
            resume_ref=resume_ref,
            resume=resume,
            on_change=on_change,
            provider=self.provider,
        )
        self._replies.add(reply)
        return reply

    def _note_privacy(self, reads_all: bool | None) -> None:
        """Keep what getMe said about privacy mode, and warn when the service wants the room (an agent
        with ``context: {ambient: N}``) but Telegram will hand over only messages addressed to the bot."""
        self.reads_all_group_messages = reads_all
        if self.overhear is not None and reads_all is False:
            log.warning(
                "Telegram privacy mode is on for @%s (getMe: can_read_all_group_messages is false): agents with"
                " context: {ambient: N} see only messages addressed to the bot in groups where it is not an"
                " admin. Turn it off in @BotFather (/setprivacy → Disable), then remove and re-add the bot"
                " to each group (docs/channels/telegram.md)",
                self.bot_username,
            )

    def handle(self) -> str | None:
        """@username as getMe reported it once connected (config ``bot_username`` until then)."""
        return self.bot_username

    def is_allowed(self, message: InboundMessage) -> bool:
        return not self._allowed or self.allow_listed(message)

    def allow_listed(self, message: InboundMessage) -> bool:
        """Named in ``allowed_users`` by id or @username (a member, docs/security.md)."""
        username = _normalise_user(str(message.context.get("username") or ""))
        return message.sender.id in self._allowed or (bool(username) and username in self._allowed)

    # --- doctor ----------------------------------------------------------------------------------------
    async def check(self) -> str | None:
        """``getMe`` with the configured token (and ``getWebhookInfo`` in webhook mode): None when it
        works, else what to fix."""
        bot = Bot(
            self.config.bot_token or "",
            base_url=f"{self._root()}/bot",
            base_file_url=f"{self._root()}/file/bot",
            request=HTTPXRequest(connect_timeout=5, read_timeout=10),
        )
        webhook: str | None = None
        try:
            async with bot:
                username = bot.username
                if self.config.mode == "webhook":
                    expected = registered_url(self.config, self.settings)
                    webhook = webhook_problem(await bot.get_webhook_info(), expected)
        except tg_errors.InvalidToken:
            return "Telegram rejected bot_token (getMe returned Unauthorized); copy it again from @BotFather"
        except tg_errors.NetworkError as exc:
            return f"cannot reach the Bot API at {self._root()}: {map_error(exc)}"
        except tg_errors.TelegramError as exc:
            return f"getMe failed: {map_error(exc)}"
        configured = (self.config.bot_username or "").lstrip("@")
        if configured and configured.lower() != (username or "").lower():
            return f"bot_username is @{configured} but the token belongs to @{username}"
        return webhook


def _normalise_user(value: str) -> str:
    """Allow-list entries: numeric ids as-is, usernames lower-cased without ``@``."""
    return value.strip().lstrip("@").lower()
