r"""A fake Discord: REST under ``/api/v10``, a gateway websocket and an attachment CDN, on 127.0.0.1.

The real discord.py client talks to it unchanged once pointed at it::

    with FakeDiscord() as fake:
        DiscordConfig(bot_token=fake.token, api_base_url=fake.api_base_url, gateway_url=fake.gateway_url)

What it does, and why each piece is here:

* Gateway: HELLO (op 10) → the client's IDENTIFY → READY (bot user, guilds as unavailable) followed by one
  GUILD_CREATE per guild, so discord.py knows the guild's channels and threads. Heartbeats (op 1) get op 11;
  RESUME (op 6) gets RESUMED. Frames are compressed the way the client asked in the URL query
  (``compress=zstd-stream`` or ``zlib-stream``; discord.py picks zstd when ``zstandard`` is installed),
  or sent as plain text frames when no compression is asked for.
* REST: every response is ``Content-Type: application/json`` exactly (discord.py compares the header
  verbatim and otherwise treats the body as text). Messages keep their edit history and the
  ``allowed_mentions`` of every send/edit, so a test can assert what a user saw and who would be pinged.
* Messages, from Discord's message docs: ``content`` at most 2,000 characters and embeds within their
  limits (400 code 50035 with the field errors nested as Discord nests them), nothing to show is 400
  code 50006, an unknown channel 404 code 10003; ``hidden_channels`` (no VIEW_CHANNEL: 403 code 50001),
  ``read_only_channels`` (no SEND_MESSAGES: 403 code 50013) and ``no_history_channels`` (no
  READ_MESSAGE_HISTORY: history answers an empty page) model missing permissions and show in
  GUILD_CREATE as @everyone overwrites. ``route_limits`` gives a route a bucket: every answer carries
  ``X-RateLimit-*`` headers and the call past it is a 429 (``rate_limited`` lists those).
* Failures: :meth:`fail_next` makes the next call of a route fail the way Discord does (a 429 carries
  ``retry_after`` in the JSON body and a ``Via`` header — without ``Via`` discord.py assumes a Cloudflare
  ban and does not retry; ``cloudflare=True`` reproduces that).

* History: ``GET /channels/{id}/messages`` with ``before`` / ``after`` / ``around`` and ``limit`` as
  Discord serves it — ``limit`` 1-100 (default 50, anything else is a 400), newest first in every mode
  (with ``after`` it is the ``limit`` messages right after that id, still newest first; discord.py
  reverses them for ``history(after=…)``). Every message is kept, also those "sent" while no bot is
  connected (:meth:`message_create` stores before it dispatches), which is what a restarted bot reads.
  ``GET /channels/{id}`` answers for server channels, threads and DMs.
* Ids are real snowflakes (milliseconds since the Discord epoch in the top bits), so time-bounded
  reads work; :meth:`id_at` makes one for a moment in the past.

* Slash commands, from Discord's interaction docs: ``GET``/``PUT /applications/{id}/commands`` (the bulk
  overwrite validates as Discord does — names ``^[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$`` in
  lowercase, descriptions 1-100 characters, at most 25 options with required ones first, at most 100
  commands, unique names — and answers 400 code 50035 "Invalid Form Body" otherwise).
  :meth:`interaction_create` dispatches INTERACTION_CREATE (type 2) for a registered command.
  ``POST /interactions/{id}/{token}/callback`` accepts exactly one callback within 3 s of the dispatch
  (a second: 400 code 40060 "Interaction has already been acknowledged"; a late one: 404 code 10062
  "Unknown interaction"), types 4 (message; ``data.flags`` 64 = ephemeral) and 5 (deferred, "thinking").
  The interaction webhook (``/webhooks/{application_id}/{token}``, no bot token) edits the original
  response (``messages/@original``) and sends/edits followups for 15 minutes (then 401 code 50027
  "Invalid Webhook Token"); the first followup after a deferral fills the "thinking" original and keeps
  the deferral's ephemerality. :meth:`age_interaction` moves an interaction into the past.
* Buttons, from Discord's message components docs: ``components`` on a message create/edit, an
  interaction response or a webhook message is validated (at most 5 action rows, type 1, of 1-5 buttons,
  type 2; styles 1-6; a non-link button needs a ``custom_id`` of 1-100 characters, unique in the message;
  a label of at most 80; otherwise 400 code 50035 "Invalid Form Body"). An edit that leaves
  ``components`` out keeps the message's buttons, as Discord does; ``components: []`` removes them.
  :meth:`press` is a user clicking a button the message shows: INTERACTION_CREATE type 3
  (``MESSAGE_COMPONENT``) with the pressed message; :meth:`redeliver` sends the same event again, as a
  gateway replay after a resume would. A press accepts callback types 4-7 (6, ``DEFERRED_UPDATE_MESSAGE``,
  and 7, ``UPDATE_MESSAGE``, only for presses), once and within 3 s like any interaction; after 6/7 the
  interaction's ``@original`` is the pressed message.

Route names for :meth:`fail_next` and ``calls``: ``me``, ``application``, ``gateway``, ``send``, ``edit``,
``thread``, ``typing``, ``attachment``, ``history``, ``channel``, ``commands`` (GET), ``commands_put``,
``callback``, ``original`` (GET/PATCH/DELETE of @original), ``followup`` (POST), ``followup_edit``,
``dm`` (Create DM).
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import time
import unicodedata
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from tests.fakes.server import ThreadedServer

try:  # discord.py asks for zstd-stream whenever zstandard is importable; mirror that
    import zstandard
except ImportError:  # pragma: no cover - depends on the environment
    zstandard = None  # type: ignore[assignment]

# Gateway opcodes (https://discord.com/developers/docs/topics/opcodes-and-status-codes)
OP_DISPATCH, OP_HEARTBEAT, OP_IDENTIFY, OP_RESUME = 0, 1, 2, 6
OP_INVALID_SESSION, OP_HELLO, OP_HEARTBEAT_ACK = 9, 10, 11

MESSAGE_CONTENT_INTENT = 1 << 15  # gateway intent bit the client asks for in IDENTIFY
# Permission bits (https://discord.com/developers/docs/topics/permissions)
VIEW_CHANNEL, SEND_MESSAGES, READ_MESSAGE_HISTORY = 1 << 10, 1 << 11, 1 << 16
MESSAGE_CONTENT_INTENT_FLAG = 1 << 18  # application flag GATEWAY_MESSAGE_CONTENT
DISCORD_EPOCH_MS = 1_420_070_400_000
HISTORY_MAX_LIMIT, HISTORY_DEFAULT_LIMIT = 100, 50
# Application commands and interactions (https://discord.com/developers/docs/interactions/…)
#: Scripts the naming regex allows besides letters and numbers: Devanagari and Thai (their marks too).
_DEVA_THAI = ((0x0900, 0x097F), (0xA8E0, 0xA8FF), (0x0E00, 0x0E7F))
COMMAND_DESCRIPTION_MAX, COMMAND_OPTIONS_MAX, GLOBAL_COMMANDS_MAX = 100, 25, 100
OPTION_TYPES = range(1, 12)  # SUB_COMMAND … ATTACHMENT
CALLBACK_MESSAGE, CALLBACK_DEFERRED = (
    4,
    5,
)  # CHANNEL_MESSAGE_WITH_SOURCE, DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE
CALLBACK_DEFERRED_UPDATE, CALLBACK_UPDATE = 6, 7  # DEFERRED_UPDATE_MESSAGE, UPDATE_MESSAGE (components only)
INTERACTION_COMMAND, INTERACTION_COMPONENT = 2, 3  # APPLICATION_COMMAND, MESSAGE_COMPONENT
# Message components (https://discord.com/developers/docs/components/reference)
ACTION_ROW, BUTTON = 1, 2
BUTTON_STYLES = range(1, 7)  # primary, secondary, success, danger, link, premium
LINK_STYLE, PREMIUM_STYLE = 5, 6
ROWS_MAX, BUTTONS_PER_ROW_MAX = 5, 5
CUSTOM_ID_MAX, BUTTON_LABEL_MAX = 100, 80
EPHEMERAL = 1 << 6
#: A message's flag for a voice message (Discord's message flags: ``1 << 13``).
IS_VOICE_MESSAGE = 1 << 13
#: Message flags an interaction response or followup may set: SUPPRESS_EMBEDS, EPHEMERAL,
#: SUPPRESS_NOTIFICATIONS, IS_COMPONENTS_V2.
RESPONSE_FLAGS = (1 << 2) | EPHEMERAL | (1 << 12) | (1 << 15)
MESSAGE_CONTENT_MAX = 2000
#: Embed limits (https://discord.com/developers/docs/resources/message#embed-object-embed-limits): at most
#: 10 embeds a message; title 256, description 4096, 25 fields (name 256, value 1024), footer 2048,
#: author name 256 characters; and 6000 characters over all of a message's embeds together.
EMBEDS_MAX, EMBED_TOTAL_MAX, EMBED_FIELDS_MAX = 10, 6000, 25
EMBED_TEXT_LIMITS = {"title": 256, "description": 4096}
EMBED_FIELD_LIMITS = {"name": 256, "value": 1024}
EMBED_FOOTER_MAX, EMBED_AUTHOR_MAX = 2048, 256
ACK_WINDOW_SECONDS = 3.0
TOKEN_LIFETIME_SECONDS = 15 * 60


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON response whose Content-Type is exactly ``application/json`` (no charset suffix)."""
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(data).encode(), status=status, headers=all_headers)


#: Where :meth:`FakeDiscord._bucket` leaves the ``X-RateLimit-*`` headers of a request's answer.
RATELIMIT_HEADERS = web.RequestKey("ratelimit_headers", dict)


@web.middleware
async def _rate_limit_headers(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every answer of a limited route carries its bucket's ``X-RateLimit-*`` headers, as Discord's do."""
    response: web.StreamResponse = await handler(request)
    headers = request.get(RATELIMIT_HEADERS)
    if headers and not response.prepared:
        response.headers.update(headers)
    return response


@dataclass
class FakeMessage:
    """One message as a Discord user would see it, with every version it went through."""

    id: str
    channel_id: str
    author_id: str
    history: list[str] = field(default_factory=list)
    allowed_mentions: list[dict[str, Any] | None] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    reference: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    flags: int = 0
    #: The interaction whose response or followup this is (None for an ordinary message).
    interaction: str | None = None
    #: An interaction's deferred original still showing "<bot> is thinking…".
    loading: bool = False
    #: The components the message shows now, and what every send/edit that set them set.
    components: list[dict[str, Any]] = field(default_factory=list)
    components_history: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def buttons(self) -> list[dict[str, Any]]:
        """The buttons the message shows now, row by row."""
        return [c for row in self.components for c in row.get("components", []) if c.get("type") == BUTTON]

    @property
    def button_labels(self) -> list[str]:
        return [str(b.get("label")) for b in self.buttons]

    def set_components(self, components: list[dict[str, Any]]) -> None:
        self.components = components
        self.components_history.append(components)

    @property
    def text(self) -> str:
        return self.history[-1] if self.history else ""

    @property
    def ephemeral(self) -> bool:
        """Only the person who ran the command sees it."""
        return bool(self.flags & EPHEMERAL)


@dataclass
class FakeInteraction:
    """One slash command a user ran, and what the bot did with it."""

    id: str
    token: str
    channel_id: str
    user_id: str
    name: str
    args: str | None
    guild_id: str | None
    dispatched_at: float  # time.monotonic() of the INTERACTION_CREATE
    #: Interaction type: 2 a slash command, 3 a button press (then ``custom_id`` and ``message_id``).
    kind: int = INTERACTION_COMMAND
    custom_id: str | None = None
    message_id: str | None = None
    #: The INTERACTION_CREATE payload, for :meth:`FakeDiscord.redeliver`.
    payload: dict[str, Any] = field(default_factory=dict)
    callback_attempts: int = 0  # every POST to the callback endpoint, accepted or not
    callback_type: int | None = None
    callback_after: float | None = None  # seconds from dispatch to the accepted callback
    ephemeral: bool = False  # set by the callback (type 4 or 5)
    original: str | None = None  # message id of the original response
    followups: list[str] = field(default_factory=list)


@dataclass
class _Failure:
    status: int
    retry_after: float | None
    code: int
    cloudflare: bool


@dataclass
class _Connection:
    ws: web.WebSocketResponse
    compress: str | None
    sequence: int = 0
    identified: bool = False
    session_id: str = ""
    zlib_ctx: Any = None
    zstd_ctx: Any = None


class FakeDiscord(ThreadedServer):
    def __init__(
        self,
        *,
        token: str = "fake-discord-bot-token",
        bot_name: str = "switchboard",
        guilds: dict[str, list[str]] | None = None,
        message_content_intent: bool = True,
    ) -> None:
        super().__init__()
        self.token = token
        self._ids = itertools.count(1)
        self._id_lock = threading.Lock()
        self._last_id = 0
        self.dms: dict[str, str] = {}  # DM channel id → the user on the other side
        self.bot_id = self.new_id()
        self.bot_name = bot_name
        self.message_content_intent = message_content_intent
        #: guild id → its text channel ids. One guild with one channel unless told otherwise.
        if guilds is None:
            guilds = {self.new_id(): [self.new_id()]}
        self.guilds = guilds
        #: guild id → roles a test added with :meth:`add_role` (@everyone is implicit).
        self.roles: dict[str, list[dict[str, Any]]] = {}
        self.messages: dict[str, FakeMessage] = {}
        self.threads: dict[str, dict[str, Any]] = {}  # thread id → channel object
        self.typing: list[str] = []  # channel ids, one entry per typing trigger
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        #: While True the gateway refuses connections (503), as during a Discord outage.
        self.gateway_down = False
        #: While True a RESUME is answered with INVALID_SESSION (op 9, not resumable): the client must
        #: IDENTIFY again and gets a new session without the events it missed, as when a session expired.
        self.refuse_resume = False
        self.gateway_queries: list[dict[str, str]] = []
        self._attachments: dict[str, tuple[str, bytes, str | None]] = {}  # id → (name, data, mime)
        self._failures: dict[str, list[_Failure]] = {}
        #: The application's global commands, as the last bulk overwrite left them.
        self.app_commands: list[dict[str, Any]] = []
        self.interactions: dict[str, FakeInteraction] = {}
        #: Channels the bot cannot see (no VIEW_CHANNEL): reading, sending and editing there is 403 code
        #: 50001 "Missing Access". These three sets show in GUILD_CREATE as @everyone overwrites, so set
        #: them before the bot connects for its client to know.
        self.hidden_channels: set[str] = set()
        #: Channels where the bot lacks SEND_MESSAGES: a send is 403 code 50013 "Missing Permissions".
        self.read_only_channels: set[str] = set()
        #: Users who do not take DMs from the bot: a send into their DM is 403 code 50007.
        self.closed_dms: set[str] = set()
        #: Channels where the bot lacks READ_MESSAGE_HISTORY: Get Channel Messages answers an empty list.
        self.no_history_channels: set[str] = set()
        self._connections: list[_Connection] = []
        self._state_lock = threading.Lock()
        #: Per-route buckets, (requests, seconds) per channel or interaction token, for a test to set.
        #: Discord publishes no numbers ("parse the headers, do not hard-code limits"), so none is on by
        #: default; a bucket that is set answers with Discord's ``X-RateLimit-*`` headers on every
        #: response and a 429 past its count (see :meth:`_bucket`).
        self.route_limits: dict[str, tuple[int, float]] = {}
        self._buckets: dict[tuple[str, str], tuple[float, int]] = {}  # (route, key) → (reset at, used)
        #: Requests a bucket refused with 429 (a client reading the headers never causes one).
        self.rate_limited: list[dict[str, Any]] = []

    # --- addresses --------------------------------------------------------------------------------
    @property
    def api_base_url(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://{self.host}:{self.port}/gateway"

    @property
    def guild_id(self) -> str:
        return next(iter(self.guilds))

    @property
    def channel_id(self) -> str:
        return self.guilds[self.guild_id][0]

    def new_id(self) -> str:
        """A fresh snowflake for now: increasing, with the creation time in its top 42 bits."""
        with self._id_lock:
            now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
            self._last_id = max(now | (next(self._ids) & 0xFFF), self._last_id + 1)
            return str(self._last_id)

    @staticmethod
    def id_at(moment: datetime) -> str:
        """A snowflake created at ``moment`` (for a message "sent" in the past)."""
        return str((int(moment.timestamp() * 1000) - DISCORD_EPOCH_MS) << 22 | 1)

    # --- objects ----------------------------------------------------------------------------------
    def user(self, user_id: str, name: str | None = None, *, bot: bool = False) -> dict[str, Any]:
        return {
            "id": user_id,
            "username": name or f"user{user_id[-4:]}",
            "global_name": name,
            "discriminator": "0",
            "avatar": None,
            "bot": bot,
        }

    @property
    def bot_user(self) -> dict[str, Any]:
        return {**self.user(self.bot_id, self.bot_name, bot=True), "verified": True, "mfa_enabled": False}

    def _channel_object(self, guild_id: str, channel_id: str, position: int) -> dict[str, Any]:
        # The permissions a test took away show as @everyone overwrites (the role's id is the guild's),
        # which is how a client sees them in GUILD_CREATE.
        deny = 0
        if channel_id in self.hidden_channels:
            deny |= VIEW_CHANNEL
        if channel_id in self.read_only_channels:
            deny |= SEND_MESSAGES
        if channel_id in self.no_history_channels:
            deny |= READ_MESSAGE_HISTORY
        overwrites = [{"id": guild_id, "type": 0, "allow": "0", "deny": str(deny)}] if deny else []
        return {
            "id": channel_id,
            "type": 0,
            "guild_id": guild_id,
            "name": f"channel-{position}",
            "position": position,
            "permission_overwrites": overwrites,
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "rate_limit_per_user": 0,
            "last_message_id": None,
        }

    @staticmethod
    def _role_object(role_id: str, name: str, position: int) -> dict[str, Any]:
        return {
            "id": role_id,
            "name": name,
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": position,
            "permissions": "1071698660929" if position == 0 else "0",
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }

    def add_role(self, name: str, guild_id: str | None = None) -> str:
        """Create a role in a guild (the first one by default) before the bot connects; returns its id."""
        guild_id = guild_id or self.guild_id
        roles = self.roles.setdefault(guild_id, [])
        role_id = self.new_id()
        roles.append(self._role_object(role_id, name, len(roles) + 1))
        return role_id

    def _guild_roles(self, guild_id: str) -> list[dict[str, Any]]:
        """Every role, as GUILD_CREATE carries them: @everyone's id is the guild's own id."""
        return [self._role_object(guild_id, "@everyone", 0), *self.roles.get(guild_id, [])]

    def _guild_object(self, guild_id: str) -> dict[str, Any]:
        return {
            "id": guild_id,
            "name": f"guild-{guild_id[-4:]}",
            "unavailable": False,
            "large": False,
            "member_count": 2,
            "owner_id": self.new_id(),
            "joined_at": _now(),
            "roles": self._guild_roles(guild_id),
            "emojis": [],
            "stickers": [],
            "features": [],
            # The bot's own member, so a client can work out its permissions in each channel.
            "members": [
                {
                    "user": self.bot_user,
                    "roles": [],
                    "joined_at": _now(),
                    "nick": None,
                    "deaf": False,
                    "mute": False,
                    "flags": 0,
                    "pending": False,
                }
            ],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "channels": [self._channel_object(guild_id, c, i) for i, c in enumerate(self.guilds[guild_id])],
            "threads": [t for t in self.threads.values() if t["guild_id"] == guild_id],
        }

    def _guild_of(self, channel_id: str) -> str | None:
        for guild_id, channels in self.guilds.items():
            if channel_id in channels:
                return guild_id
        thread = self.threads.get(channel_id)
        return thread["guild_id"] if thread else None

    def _message_object(self, message: FakeMessage, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {
            "id": message.id,
            "channel_id": message.channel_id,
            "author": self.bot_user if message.author_id == self.bot_id else self.user(message.author_id),
            "content": message.text,
            "timestamp": _now(),
            "edited_timestamp": _now() if len(message.history) > 1 else None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
            "components": message.components,
        }
        guild_id = self._guild_of(message.channel_id)
        if guild_id:
            body["guild_id"] = guild_id
        body.update(message.payload)
        body.update(extra or {})
        return body

    # --- test API: injecting events -----------------------------------------------------------------
    def dm_channel(self, user_id: str) -> str:
        """The DM channel between the bot and ``user_id`` (opened now if it does not exist yet)."""
        with self._state_lock:
            channel_id = next((c for c, u in self.dms.items() if u == user_id), None)
            if channel_id is None:
                channel_id = self.new_id()
                self.dms[channel_id] = user_id
            return channel_id

    def add_attachment(self, name: str, data: bytes, mime: str | None = None) -> dict[str, Any]:
        """Store a file on the fake CDN and return the attachment object a message would carry."""
        attachment_id = self.new_id()
        with self._state_lock:
            self._attachments[attachment_id] = (name, data, mime)
        url = f"{self.url}/attachments/{attachment_id}/{name}"
        body: dict[str, Any] = {
            "id": attachment_id,
            "filename": name,
            "size": len(data),
            "url": url,
            "proxy_url": url,
        }
        if mime:
            body["content_type"] = mime
        return body

    def voice_message(self, channel_id: str, author: str, data: bytes, seconds: float) -> dict[str, Any]:
        """A voice message as Discord's clients send it: no content, the ``IS_VOICE_MESSAGE`` flag, and
        one Ogg/Opus attachment ``voice-message.ogg`` with ``duration_secs`` and a base64 ``waveform``."""
        attachment = self.add_attachment("voice-message.ogg", data, "audio/ogg")
        attachment.update(duration_secs=seconds, waveform="AAAAAAAAAAAA", flags=0)
        return self.message_create(channel_id, author, "", attachments=[attachment], flags=IS_VOICE_MESSAGE)

    def message_create(
        self,
        channel_id: str,
        author: str | dict[str, Any],
        content: str,
        *,
        guild_id: str | None = None,
        mentions: list[str] | None = None,
        attachments: list[dict[str, Any] | tuple[str, bytes]] | None = None,
        message_id: str | None = None,
        author_is_bot: bool = False,
        roles: list[str] | None = None,
        flags: int = 0,
    ) -> dict[str, Any]:
        """Deliver a MESSAGE_CREATE dispatch to every identified gateway connection; returns its payload.

        ``author`` is a user id (or a full user object). ``mentions`` are user ids (put ``<@id>`` in
        ``content`` yourself, as the Discord client does). ``attachments`` are attachment objects from
        :meth:`add_attachment` or ``(name, bytes)`` pairs. Pass the same ``message_id`` to redeliver.
        ``roles`` are the author's role ids (from :meth:`add_role`) in a guild message's ``member``.
        """
        user = author if isinstance(author, dict) else self.user(author, bot=author_is_bot)
        files = []
        for item in attachments or []:
            files.append(self.add_attachment(*item) if isinstance(item, tuple) else item)
        payload = {
            "id": message_id or self.new_id(),
            "channel_id": channel_id,
            "author": user,
            "content": content,
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [self.bot_user if m == self.bot_id else self.user(m) for m in mentions or []],
            "mention_roles": [],
            "attachments": files,
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": flags,
            "components": [],
        }
        guild_id = guild_id or self._guild_of(channel_id)
        if guild_id:
            payload["guild_id"] = guild_id
        unknown = set(roles or []) - {role["id"] for role in self.roles.get(guild_id or "", [])}
        if unknown:  # Discord only ever names the guild's own roles (and a DM has no member at all)
            raise ValueError(f"roles {sorted(unknown)} do not exist in guild {guild_id}")
        with self._state_lock:
            if guild_id is None:
                self.dms.setdefault(channel_id, user["id"])
            # The whole payload is kept: channel history serves it back (mentions, attachments …).
            self.messages.setdefault(
                payload["id"],
                FakeMessage(payload["id"], channel_id, user["id"], [content], payload=dict(payload)),
            )
        if guild_id:
            # Guild messages carry the author's partial member (no ``user``); the REST history does not.
            payload["member"] = {
                "roles": list(roles or []),
                "joined_at": _now(),
                "nick": None,
                "avatar": None,
                "premium_since": None,
                "deaf": False,
                "mute": False,
                "flags": 0,
                "pending": False,
                "communication_disabled_until": None,
            }
        self.call(lambda: self._dispatch("MESSAGE_CREATE", payload))
        return payload

    def interaction_create(
        self,
        channel_id: str,
        author: str,
        name: str,
        args: str | None = None,
        *,
        guild_id: str | None = None,
        age: float = 0.0,
    ) -> FakeInteraction:
        """A user runs ``/name args`` in ``channel_id``: dispatch INTERACTION_CREATE (application command).

        As in Discord, only a registered command can be run (a test that forgets to wait for the bot's
        registration gets a ValueError here, not a silent pass). ``age`` makes it an interaction created
        that many seconds ago (its id and its deadlines), as if it reached the bot that late.
        """
        with self._state_lock:
            command = next((c for c in self.app_commands if c["name"] == name), None)
        if command is None:
            raise ValueError(f"/{name} is not a registered application command")
        guild_id = guild_id or self._guild_of(channel_id)
        created = datetime.now(UTC) - timedelta(seconds=age)
        interaction = FakeInteraction(
            id=self.id_at(created) if age else self.new_id(),
            token=f"aW50ZXJhY3Rpb246{secrets.token_urlsafe(48)}",
            channel_id=channel_id,
            user_id=author,
            name=name,
            args=args,
            guild_id=guild_id,
            dispatched_at=time.monotonic() - age,
        )
        data: dict[str, Any] = {"id": command["id"], "name": name, "type": 1}
        if args is not None:
            data["options"] = [{"name": "args", "type": 3, "value": args}]
        self._dispatch_interaction(interaction, data)
        return interaction

    def press(
        self, message_id: str, label: str, user: str, *, guild_id: str | None = None
    ) -> FakeInteraction:
        """``user`` clicks the button ``label`` on message ``message_id``: INTERACTION_CREATE type 3.

        As in Discord, only a button the message shows now can be pressed (a LookupError names what it
        shows), and each call is a new click with its own interaction id and token.
        """
        with self._state_lock:
            message = self.messages[message_id]
            button = next((b for b in message.buttons if b.get("label") == label), None)
            shown = message.button_labels
            channel_id = message.channel_id
            message_json = self._message_object(message)
            if message.interaction is not None:
                message_json = self._webhook_message(message)
        if button is None:
            raise LookupError(f"message {message_id} shows no button {label!r} (it shows: {shown or 'none'})")
        interaction = FakeInteraction(
            id=self.new_id(),
            token=f"aW50ZXJhY3Rpb246{secrets.token_urlsafe(48)}",
            channel_id=channel_id,
            user_id=user,
            name=label,
            args=None,
            guild_id=guild_id or self._guild_of(channel_id),
            dispatched_at=time.monotonic(),
            kind=INTERACTION_COMPONENT,
            custom_id=str(button["custom_id"]),
            message_id=message_id,
        )
        data = {"custom_id": interaction.custom_id, "component_type": BUTTON}
        self._dispatch_interaction(interaction, data, message=message_json)
        return interaction

    def redeliver(self, interaction: FakeInteraction) -> None:
        """Dispatch ``interaction``'s INTERACTION_CREATE again, unchanged (a gateway replay)."""
        self.call(lambda: self._dispatch("INTERACTION_CREATE", interaction.payload))

    def _dispatch_interaction(
        self, interaction: FakeInteraction, data: dict[str, Any], *, message: dict[str, Any] | None = None
    ) -> None:
        """Build the INTERACTION_CREATE envelope for ``interaction`` and dispatch it."""
        guild_id, channel_id, author = interaction.guild_id, interaction.channel_id, interaction.user_id
        user = self.user(author)
        payload: dict[str, Any] = {
            "id": interaction.id,
            "application_id": self.bot_id,
            "type": interaction.kind,
            "data": data,
            "channel_id": channel_id,
            "token": interaction.token,
            "version": 1,
            "app_permissions": "2248473465835073",
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if message is not None:
            payload["message"] = message
        if guild_id is not None:
            channel = self._channel_json(channel_id) or self._channel_object(guild_id, channel_id, 0)
            payload.update(
                guild_id=guild_id,
                guild={"id": guild_id, "locale": "en-US", "features": []},
                guild_locale="en-US",
                channel=channel,
                member={
                    "user": user,
                    "roles": [],
                    "joined_at": _now(),
                    "deaf": False,
                    "mute": False,
                    "flags": 0,
                    "pending": False,
                    "permissions": "2248473465835073",
                },
                authorizing_integration_owners={"0": guild_id},
                context=0,  # GUILD
            )
        else:
            with self._state_lock:
                self.dms.setdefault(channel_id, author)
            payload.update(
                user=user,
                channel={"id": channel_id, "type": 1, "last_message_id": None, "recipients": [user]},
                authorizing_integration_owners={"0": "0"},
                context=1,  # BOT_DM
            )
        interaction.payload = payload
        with self._state_lock:
            self.interactions[interaction.id] = interaction
        self.call(lambda: self._dispatch("INTERACTION_CREATE", payload))

    def age_interaction(self, interaction_id: str, seconds: float) -> None:
        """Pretend ``interaction_id`` was dispatched ``seconds`` earlier (past its 3 s or 15 min limits)."""
        with self._state_lock:
            self.interactions[interaction_id].dispatched_at -= seconds

    def interaction_messages(self, interaction_id: str) -> list[FakeMessage]:
        """The original response (first) and the followups of one interaction."""
        with self._state_lock:
            found = [m for m in self.messages.values() if m.interaction == interaction_id]
        return sorted(found, key=lambda m: int(m.id))

    def fail_next(
        self,
        route: str,
        status: int = 429,
        *,
        retry_after: float | None = None,
        code: int = 0,
        times: int = 1,
        cloudflare: bool = False,
    ) -> None:
        """Make the next ``times`` calls of ``route`` fail with ``status`` (see the module doc for names).

        A 429 answers like Discord's per-route limit; ``cloudflare=True`` leaves out the ``Via`` header,
        which makes discord.py raise instead of sleeping and retrying by itself.
        """
        if status == 429 and retry_after is None:
            retry_after = 1.0
        with self._state_lock:
            self._failures.setdefault(route, []).extend(
                [_Failure(status, retry_after, code, cloudflare)] * times
            )

    def drop_connections(self, code: int = 4000) -> None:
        """Close every gateway socket the way Discord does before a reconnect (the client resumes)."""

        async def close_all() -> None:
            for conn in list(self._connections):
                await conn.ws.close(code=code, message=b"fake gateway restart")

        self.call(close_all)

    # --- test API: views --------------------------------------------------------------------------
    @property
    def calls(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.requests)

    def calls_to(self, route: str) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["route"] == route]

    def in_channel(self, channel_id: str, *, from_bot: bool = True) -> list[FakeMessage]:
        """Messages in a channel (or thread) in creation order; only the bot's by default."""
        with self._state_lock:
            found = [m for m in self.messages.values() if m.channel_id == channel_id]
        return [m for m in found if not from_bot or m.author_id == self.bot_id]

    @property
    def connected(self) -> int:
        return sum(1 for c in self._connections if c.identified)

    # --- server -----------------------------------------------------------------------------------
    def setup_routes(self, app: web.Application) -> None:
        app.middlewares.append(_rate_limit_headers)
        api = "/api/v10"
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get(f"{api}/gateway", self._get_gateway)
        app.router.add_get(f"{api}/gateway/bot", self._get_gateway)
        app.router.add_get(f"{api}/users/@me", self._me)
        app.router.add_get(f"{api}/applications/@me", self._application)
        app.router.add_get(f"{api}/oauth2/applications/@me", self._application)
        app.router.add_get(f"{api}/channels/{{cid}}", self._get_channel)
        app.router.add_get(f"{api}/channels/{{cid}}/messages", self._history)
        app.router.add_post(f"{api}/channels/{{cid}}/messages", self._send)
        app.router.add_patch(f"{api}/channels/{{cid}}/messages/{{mid}}", self._edit)
        app.router.add_post(f"{api}/channels/{{cid}}/messages/{{mid}}/threads", self._create_thread)
        app.router.add_post(f"{api}/channels/{{cid}}/typing", self._typing)
        app.router.add_get("/attachments/{aid}/{name}", self._attachment)
        app.router.add_post(f"{api}/users/@me/channels", self._create_dm)
        app.router.add_get(f"{api}/applications/{{app}}/commands", self._get_commands)
        app.router.add_put(f"{api}/applications/{{app}}/commands", self._put_commands)
        app.router.add_post(f"{api}/interactions/{{iid}}/{{token}}/callback", self._callback)
        hook = f"{api}/webhooks/{{app}}/{{token}}"
        app.router.add_post(hook, self._followup)
        app.router.add_get(f"{hook}/messages/@original", self._original)
        app.router.add_patch(f"{hook}/messages/@original", self._original)
        app.router.add_delete(f"{hook}/messages/@original", self._original)
        app.router.add_patch(f"{hook}/messages/{{mid}}", self._followup_edit)

    def _take_failure(self, route: str) -> web.Response | None:
        with self._state_lock:
            queue = self._failures.get(route)
            failure = queue.pop(0) if queue else None
        if failure is None:
            return None
        if failure.status == 429:
            body = {
                "message": "You are being rate limited.",
                "retry_after": failure.retry_after,
                "global": False,
            }
            headers = {"Retry-After": str(failure.retry_after), "X-RateLimit-Scope": "user"}
            if not failure.cloudflare:
                headers["Via"] = "1.1 google"
            return _json(body, 429, headers)
        messages = {403: "Missing Permissions", 404: "Unknown Message", 400: "Invalid Form Body"}
        code = failure.code or {403: 50013, 404: 10008, 400: 50035}.get(failure.status, 0)
        return _json({"message": messages.get(failure.status, "Server error"), "code": code}, failure.status)

    async def _begin(
        self, request: web.Request, route: str, *, bot_auth: bool = True
    ) -> tuple[web.Response | None, Any]:
        """Authenticate, read the body, record the call and apply any injected failure.

        Interaction callbacks and webhooks carry their token in the path (``bot_auth=False``)."""
        body: Any = None
        files: dict[str, bytes] = {}
        if request.content_type == "application/json":
            body = await request.json()
        elif request.content_type.startswith("multipart/"):
            reader = await request.multipart()
            async for part in reader:
                if part.name == "payload_json":
                    body = json.loads(await part.text())
                elif part.filename:
                    files[part.filename] = bytes(await part.read())
        entry = {
            "route": route,
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "json": body,
            "files": sorted(files),
            "auth_ok": request.headers.get("Authorization") == f"Bot {self.token}",
            "at": time.monotonic(),
        }
        if not bot_auth:
            entry["auth_ok"] = True
        failure = None if entry["auth_ok"] else _json({"message": "401: Unauthorized", "code": 0}, 401)
        failure = failure or self._take_failure(route) or self._bucket(request, route)
        entry["status"] = failure.status if failure is not None else 200
        self.record(entry)
        return failure, (body, files)

    def _bucket(self, request: web.Request, route: str) -> web.Response | None:
        """Count the request against its route's bucket (per channel, or per interaction token); past
        the count, 429 with Discord's body (``retry_after`` in seconds, ``global: false``), the
        ``Retry-After`` header and ``X-RateLimit-Scope: user``. The headers every answer of the bucket
        carries are left on the request for :func:`_rate_limit_headers`."""
        limit = self.route_limits.get(route)
        if limit is None:
            return None
        count, window = limit
        key = request.match_info.get("cid") or request.match_info.get("token") or ""
        now = time.time()
        with self._state_lock:
            reset_at, used = self._buckets.get((route, key), (now + window, 0))
            if now >= reset_at:
                reset_at, used = now + window, 0
            refused = used >= count
            if not refused:
                used += 1
            self._buckets[(route, key)] = (reset_at, used)
        reset_after = max(0.0, reset_at - now)
        request[RATELIMIT_HEADERS] = {
            "X-RateLimit-Limit": str(count),
            "X-RateLimit-Remaining": str(count - used),
            "X-RateLimit-Reset": f"{reset_at:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": f"fake-{route}",
        }
        if not refused:
            return None
        with self._state_lock:
            self.rate_limited.append({"route": route, "key": key, "retry_after": reset_after})
        body = {
            "message": "You are being rate limited.",
            "retry_after": round(reset_after, 3),
            "global": False,
        }
        headers = {
            "Retry-After": str(max(1, int(reset_after + 0.999))),
            "X-RateLimit-Scope": "user",
            "Via": "1.1 google",
        }
        return _json(body, 429, headers)

    async def _get_gateway(self, request: web.Request) -> web.Response:
        failure, _ = await self._begin(request, "gateway")
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return failure or _json({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _me(self, request: web.Request) -> web.Response:
        failure, _ = await self._begin(request, "me")
        return failure or _json(self.bot_user)

    async def _application(self, request: web.Request) -> web.Response:
        failure, _ = await self._begin(request, "application")
        flags = MESSAGE_CONTENT_INTENT_FLAG if self.message_content_intent else 0
        owner = self.user(self.new_id(), "app-owner")
        body = {
            "id": self.bot_id,
            "name": self.bot_name,
            "description": "",
            "icon": None,
            "bot_public": False,
            "bot_require_code_grant": False,
            "owner": owner,
            "verify_key": "0" * 64,
            "flags": flags,
            "bot": self.bot_user,
        }
        return failure or _json(body)

    def _channel_json(self, channel_id: str) -> dict[str, Any] | None:
        if channel_id in self.threads:
            return self.threads[channel_id]
        for guild_id, channels in self.guilds.items():
            if channel_id in channels:
                return self._channel_object(guild_id, channel_id, channels.index(channel_id))
        if channel_id in self.dms:
            return {
                "id": channel_id,
                "type": 1,
                "last_message_id": None,
                "recipients": [self.user(self.dms[channel_id])],
            }
        return None

    async def _get_channel(self, request: web.Request) -> web.Response:
        failure, _ = await self._begin(request, "channel")
        if failure is not None:
            return failure
        channel = self._channel_json(request.match_info["cid"])
        if channel is None:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        return _json(channel)

    async def _history(self, request: web.Request) -> web.Response:
        """Get Channel Messages, with Discord's paging rules (see the module doc)."""
        failure, _ = await self._begin(request, "history")
        if failure is not None:
            return failure
        channel_id = request.match_info["cid"]
        refused = self._access_problem(channel_id)
        if refused is not None:
            return refused
        query = request.query
        try:
            limit = int(query.get("limit", HISTORY_DEFAULT_LIMIT))
            anchors = {k: int(query[k]) for k in ("before", "after", "around") if k in query}
        except ValueError:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        if not 1 <= limit <= HISTORY_MAX_LIMIT or len(anchors) > 1:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        if channel_id in self.no_history_channels:
            # Discord: without READ_MESSAGE_HISTORY "no messages will be returned" (an empty page, 200).
            return _json([])
        with self._state_lock:
            found = sorted(
                (m for m in self.messages.values() if m.channel_id == channel_id), key=lambda m: int(m.id)
            )
        if "after" in anchors:
            page = [m for m in found if int(m.id) > anchors["after"]][:limit]
        elif "before" in anchors:
            page = [m for m in found if int(m.id) < anchors["before"]][-limit:]
        elif "around" in anchors:
            older = [m for m in found if int(m.id) < anchors["around"]][-(limit // 2) :] if limit > 1 else []
            page = (older + [m for m in found if int(m.id) >= anchors["around"]])[:limit]
        else:
            page = found[-limit:]
        return _json([self._message_object(m) for m in reversed(page)])

    async def _send(self, request: web.Request) -> web.Response:
        failure, (body, files) = await self._begin(request, "send")
        if failure is not None:
            return failure
        body = body or {}
        channel_id = request.match_info["cid"]
        refused = self._access_problem(channel_id)
        if refused is not None:
            return refused
        if channel_id in self.read_only_channels:
            return _json({"message": "Missing Permissions", "code": 50013}, 403)
        if self.dms.get(channel_id) in self.closed_dms:
            return _json({"message": "Cannot send messages to this user", "code": 50007}, 403)
        problems = self._components_problems(body["components"]) if "components" in body else {}
        if problems:
            return self._form_error(problems)
        field_problems = self._message_problems(body)
        if field_problems:
            return self._field_errors(field_problems)
        if not (
            body.get("content") or body.get("embeds") or files or body.get("sticker_ids") or body.get("poll")
        ):
            # A message needs something to show (components alone do not count for a default message).
            return _json({"message": "Cannot send an empty message", "code": 50006}, 400)
        message = FakeMessage(self.new_id(), channel_id, self.bot_id, [body.get("content") or ""])
        if "components" in body:
            message.set_components(body["components"])
        message.allowed_mentions.append(body.get("allowed_mentions"))
        message.files = files
        reference = body.get("message_reference") or {}
        message.reference = str(reference["message_id"]) if reference.get("message_id") else None
        with self._state_lock:
            self.messages[message.id] = message
        # Uploaded files are served back from the CDN route, as Discord does.
        attachments = [self.add_attachment(name, data) for name, data in files.items()]
        return _json(self._message_object(message, {"attachments": attachments}))

    async def _edit(self, request: web.Request) -> web.Response:
        failure, (body, _) = await self._begin(request, "edit")
        if failure is not None:
            return failure
        body = body or {}
        refused = self._access_problem(request.match_info["cid"])
        if refused is not None:
            return refused
        problems = self._components_problems(body["components"]) if "components" in body else {}
        if problems:
            return self._form_error(problems)
        field_problems = self._message_problems(body)
        if field_problems:
            return self._field_errors(field_problems)
        with self._state_lock:
            message = self.messages.get(request.match_info["mid"])
            if message is None or message.channel_id != request.match_info["cid"] or message.ephemeral:
                # An ephemeral interaction message exists only for its user: Edit Message says it is unknown
                # (https://github.com/discord/discord-api-docs/issues/3090); public ones are editable.
                message = None
            elif message.author_id != self.bot_id:
                return _json(
                    {"message": "Cannot edit a message authored by another user", "code": 50005}, 403
                )
            else:
                if "content" in body:
                    message.history.append(body["content"] or "")
                if "components" in body:  # left out: the message keeps its buttons
                    message.set_components(body["components"])
                message.allowed_mentions.append(body.get("allowed_mentions"))
        if message is None:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        return _json(self._message_object(message))

    async def _create_thread(self, request: web.Request) -> web.Response:
        failure, (body, _) = await self._begin(request, "thread")
        if failure is not None:
            return failure
        channel_id, message_id = request.match_info["cid"], request.match_info["mid"]
        guild_id = self._guild_of(channel_id)
        if guild_id is None:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        if message_id in self.threads:
            body = {"message": "A thread has already been created for this message", "code": 160004}
            return _json(body, 400)
        thread = {
            "id": message_id,  # Discord gives a thread started from a message the message's id
            "type": 11,
            "guild_id": guild_id,
            "parent_id": channel_id,
            "owner_id": self.bot_id,
            "name": (body or {}).get("name") or "thread",
            "last_message_id": None,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "total_message_sent": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": (body or {}).get("auto_archive_duration") or 1440,
                "archive_timestamp": _now(),
                "locked": False,
            },
        }
        with self._state_lock:
            self.threads[message_id] = thread
        await self._dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return _json(thread, 201)

    async def _typing(self, request: web.Request) -> web.Response:
        failure, _ = await self._begin(request, "typing")
        if failure is not None:
            return failure
        with self._state_lock:
            self.typing.append(request.match_info["cid"])
        return web.Response(status=204)

    async def _attachment(self, request: web.Request) -> web.Response:
        self.record(
            {"route": "attachment", "method": "GET", "path": request.path, "json": None, "status": 200}
        )
        failure = self._take_failure("attachment")
        if failure is not None:
            return failure
        stored = self._attachments.get(request.match_info["aid"])
        if stored is None:
            return web.Response(status=404, text="not found")
        _, data, mime = stored
        return web.Response(body=data, content_type=mime or "application/octet-stream")

    async def _create_dm(self, request: web.Request) -> web.Response:
        """Create DM: the DM channel with ``recipient_id`` (the same one every time)."""
        failure, (body, _) = await self._begin(request, "dm")
        if failure is not None:
            return failure
        recipient = str((body or {}).get("recipient_id") or "")
        if not recipient:
            return self._form_error({"recipient_id": "BASE_TYPE_REQUIRED"})
        return _json(self._channel_json(self.dm_channel(recipient)))

    # --- application commands and interactions ---------------------------------------------------------
    @staticmethod
    def _valid_command_name(name: object) -> bool:
        """``^[-_'\\p{L}\\p{N}\\p{sc=Deva}\\p{sc=Thai}]{1,32}$``, and lowercase where a letter has a case."""
        if not isinstance(name, str) or not 1 <= len(name) <= 32 or name != name.lower():
            return False
        return all(
            ch in "-_'"
            or unicodedata.category(ch)[0] in "LN"
            or any(lo <= ord(ch) <= hi for lo, hi in _DEVA_THAI)
            for ch in name
        )

    @staticmethod
    def _components_problems(components: Any, where: str = "components") -> dict[str, str]:
        """What Discord's component docs say a message's buttons must satisfy, as field → problem."""
        if not isinstance(components, list):
            return {where: "BASE_TYPE_ARRAY"}
        if len(components) > ROWS_MAX:
            return {where: f"BASE_TYPE_MAX_LENGTH ({ROWS_MAX})"}
        problems: dict[str, str] = {}
        seen: set[str] = set()
        for r, row in enumerate(components):
            at = f"{where}.{r}"
            if not isinstance(row, dict) or row.get("type") != ACTION_ROW:
                problems[f"{at}.type"] = "UNION_TYPE_CHOICES (top-level components are action rows)"
                continue
            children = row.get("components")
            if not isinstance(children, list) or not 1 <= len(children) <= BUTTONS_PER_ROW_MAX:
                problems[f"{at}.components"] = f"BASE_TYPE_BAD_LENGTH (1-{BUTTONS_PER_ROW_MAX})"
                continue
            for b, button in enumerate(children):
                here = f"{at}.components.{b}"
                if not isinstance(button, dict) or button.get("type") != BUTTON:
                    problems[f"{here}.type"] = "UNION_TYPE_CHOICES (this fake models buttons only)"
                    continue
                style, custom_id, label = button.get("style"), button.get("custom_id"), button.get("label")
                if style not in BUTTON_STYLES:
                    problems[f"{here}.style"] = "BASE_TYPE_CHOICES"
                elif style == LINK_STYLE:
                    if not button.get("url") or custom_id is not None:
                        problems[f"{here}.url"] = "BUTTON_COMPONENT_URL_REQUIRED (and no custom_id)"
                elif style != PREMIUM_STYLE:
                    if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= CUSTOM_ID_MAX:
                        problems[f"{here}.custom_id"] = f"BASE_TYPE_BAD_LENGTH (1-{CUSTOM_ID_MAX})"
                    elif custom_id in seen:
                        problems[f"{here}.custom_id"] = "COMPONENT_CUSTOM_ID_DUPLICATED"
                    else:
                        seen.add(custom_id)
                if label is not None and (not isinstance(label, str) or len(label) > BUTTON_LABEL_MAX):
                    problems[f"{here}.label"] = f"BASE_TYPE_MAX_LENGTH ({BUTTON_LABEL_MAX})"
                if not label and not button.get("emoji") and style != PREMIUM_STYLE:
                    problems[f"{here}.label"] = "BUTTON_COMPONENT_LABEL_OR_EMOJI_REQUIRED"
        return problems

    @staticmethod
    def _form_error(errors: dict[str, Any]) -> web.Response:
        return _json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)

    @staticmethod
    def _field_errors(problems: dict[str, tuple[str, str]]) -> web.Response:
        """400 code 50035 with ``errors`` nested the way Discord nests them: each dotted path becomes
        objects (``embeds.0.title`` → ``{"embeds": {"0": {"title": {"_errors": [...]}}}}``)."""
        errors: dict[str, Any] = {}
        for path, (code, message) in problems.items():
            node = errors
            for part in path.split("."):
                node = node.setdefault(part, {})
            node.setdefault("_errors", []).append({"code": code, "message": message})
        return _json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)

    @staticmethod
    def _message_problems(body: dict[str, Any]) -> dict[str, tuple[str, str]]:
        """Create/Edit Message: what Discord refuses in ``content`` and ``embeds``, as path → (code, text)."""
        problems: dict[str, tuple[str, str]] = {}
        content = body.get("content")
        if content is not None and (not isinstance(content, str) or len(content) > MESSAGE_CONTENT_MAX):
            problems["content"] = (
                "BASE_TYPE_MAX_LENGTH",
                f"Must be {MESSAGE_CONTENT_MAX} or fewer in length.",
            )
        embeds = body.get("embeds")
        if embeds is None:
            return problems
        if not isinstance(embeds, list) or len(embeds) > EMBEDS_MAX:
            problems["embeds"] = ("BASE_TYPE_MAX_LENGTH", f"Must be {EMBEDS_MAX} or fewer in length.")
            return problems
        total = 0
        for i, embed in enumerate(embeds):
            embed = embed if isinstance(embed, dict) else {}
            for key, limit in EMBED_TEXT_LIMITS.items():
                text = str(embed.get(key) or "")
                total += len(text)
                if len(text) > limit:
                    problems[f"embeds.{i}.{key}"] = (
                        "BASE_TYPE_MAX_LENGTH",
                        f"Must be {limit} or fewer in length.",
                    )
            fields = embed.get("fields") or []
            if len(fields) > EMBED_FIELDS_MAX:
                problems[f"embeds.{i}.fields"] = (
                    "BASE_TYPE_MAX_LENGTH",
                    f"Must be {EMBED_FIELDS_MAX} or fewer in length.",
                )
            for j, item in enumerate(fields[:EMBED_FIELDS_MAX]):
                for key, limit in EMBED_FIELD_LIMITS.items():
                    text = str((item or {}).get(key) or "")
                    total += len(text)
                    if not text:
                        problems[f"embeds.{i}.fields.{j}.{key}"] = (
                            "BASE_TYPE_REQUIRED",
                            "This field is required",
                        )
                    elif len(text) > limit:
                        problems[f"embeds.{i}.fields.{j}.{key}"] = (
                            "BASE_TYPE_MAX_LENGTH",
                            f"Must be {limit} or fewer in length.",
                        )
            for key, sub, limit in (
                ("footer", "text", EMBED_FOOTER_MAX),
                ("author", "name", EMBED_AUTHOR_MAX),
            ):
                text = str((embed.get(key) or {}).get(sub) or "")
                total += len(text)
                if len(text) > limit:
                    problems[f"embeds.{i}.{key}.{sub}"] = (
                        "BASE_TYPE_MAX_LENGTH",
                        f"Must be {limit} or fewer in length.",
                    )
        if total > EMBED_TOTAL_MAX:
            problems["embeds"] = (
                "MAX_EMBED_SIZE_EXCEEDED",
                f"Embed size exceeds maximum size of {EMBED_TOTAL_MAX}",
            )
        return problems

    def _access_problem(self, channel_id: str) -> web.Response | None:
        """A channel that does not exist is 404 code 10003; one the bot cannot see (no VIEW_CHANNEL) is
        403 code 50001 "Missing Access"; one it may see but not write in (no SEND_MESSAGES) is 403 code
        50013 "Missing Permissions" — for sending only, the caller checks that."""
        if self._channel_json(channel_id) is None:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        if channel_id in self.hidden_channels:
            return _json({"message": "Missing Access", "code": 50001}, 403)
        return None

    @staticmethod
    def _command_problems(command: Any) -> dict[str, str]:
        """What Discord's docs say a CHAT_INPUT command must satisfy, as field → problem."""
        if not isinstance(command, dict):
            return {"_": "must be an object"}
        problems: dict[str, str] = {}
        name, description = command.get("name"), command.get("description")
        if command.get("type", 1) == 1:
            if not FakeDiscord._valid_command_name(name):
                problems["name"] = "APPLICATION_COMMAND_INVALID_NAME"
            if not isinstance(description, str) or not 1 <= len(description) <= COMMAND_DESCRIPTION_MAX:
                problems["description"] = "BASE_TYPE_BAD_LENGTH (1-100)"
        options = command.get("options") or []
        if not isinstance(options, list) or len(options) > COMMAND_OPTIONS_MAX:
            problems["options"] = "BASE_TYPE_MAX_LENGTH (25)"
            return problems
        seen_optional = False
        for i, option in enumerate(options):
            if not isinstance(option, dict) or option.get("type") not in OPTION_TYPES:
                problems[f"options.{i}.type"] = "BASE_TYPE_CHOICES"
                continue
            opt_name, opt_description = option.get("name"), option.get("description")
            if not FakeDiscord._valid_command_name(opt_name):
                problems[f"options.{i}.name"] = "APPLICATION_COMMAND_INVALID_NAME"
            if (
                not isinstance(opt_description, str)
                or not 1 <= len(opt_description) <= COMMAND_DESCRIPTION_MAX
            ):
                problems[f"options.{i}.description"] = "BASE_TYPE_BAD_LENGTH (1-100)"
            if option.get("required"):
                if seen_optional:
                    problems[f"options.{i}.required"] = "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID"
            else:
                seen_optional = True
        return problems

    async def _get_commands(self, request: web.Request) -> web.Response:
        failure, _ = await self._begin(request, "commands")
        if failure is not None:
            return failure
        if request.match_info["app"] != self.bot_id:
            return _json({"message": "Unknown Application", "code": 10002}, 404)
        with self._state_lock:
            return _json(list(self.app_commands))

    async def _put_commands(self, request: web.Request) -> web.Response:
        """Bulk Overwrite Global Application Commands: the body replaces every global command."""
        failure, (body, _) = await self._begin(request, "commands_put")
        if failure is not None:
            return failure
        if request.match_info["app"] != self.bot_id:
            return _json({"message": "Unknown Application", "code": 10002}, 404)
        if not isinstance(body, list):
            return self._form_error({"_": "BASE_TYPE_ARRAY"})
        if len(body) > GLOBAL_COMMANDS_MAX:
            return self._form_error({"_": "BASE_TYPE_MAX_LENGTH (100)"})
        errors = {f"{i}.{k}": v for i, c in enumerate(body) for k, v in self._command_problems(c).items()}
        names = [c.get("name") for c in body if isinstance(c, dict)]
        if len(names) != len(set(names)):
            errors["_"] = "APPLICATION_COMMANDS_DUPLICATE_NAME"
        if errors:
            return self._form_error(errors)
        with self._state_lock:
            old_ids = {c["name"]: c["id"] for c in self.app_commands}
            self.app_commands = [
                {
                    "id": old_ids.get(c["name"]) or self.new_id(),
                    "application_id": self.bot_id,
                    "version": self.new_id(),
                    "type": c.get("type", 1),
                    "name": c["name"],
                    "description": c.get("description", ""),
                    # Discord leaves ``required: false`` out of what it serves back.
                    "options": [
                        {k: v for k, v in o.items() if not (k == "required" and v is False)}
                        for o in c.get("options") or []
                    ],
                    "default_member_permissions": c.get("default_member_permissions"),
                    "nsfw": False,
                    "integration_types": [0],
                    "contexts": None,
                }
                for c in body
            ]
            return _json(list(self.app_commands))

    def _interaction_for_token(self, app: str, token: str) -> FakeInteraction | None:
        if app != self.bot_id:
            return None
        return next((i for i in self.interactions.values() if i.token == token), None)

    def _response_message(
        self, interaction: FakeInteraction, body: dict[str, Any], flags: int
    ) -> FakeMessage:
        message = FakeMessage(
            self.new_id(),
            interaction.channel_id,
            self.bot_id,
            [body.get("content") or ""],
            flags=flags,
            interaction=interaction.id,
        )
        if "components" in body:
            message.set_components(body["components"])
        message.allowed_mentions.append(body.get("allowed_mentions"))
        self.messages[message.id] = message
        return message

    @staticmethod
    def _content_problem(body: dict[str, Any]) -> str | None:
        content = body.get("content")
        if content is not None and len(content) > MESSAGE_CONTENT_MAX:
            return "BASE_TYPE_MAX_LENGTH (2000)"
        embed_problems = FakeDiscord._message_problems({"embeds": body.get("embeds")})
        if embed_problems:
            return "; ".join(f"{path}: {code}" for path, (code, _) in embed_problems.items())
        if int(body.get("flags") or 0) & ~RESPONSE_FLAGS:
            return "MESSAGE_FLAGS_INVALID"
        if "components" in body:
            problems = FakeDiscord._components_problems(body["components"])
            if problems:
                return "; ".join(f"{k}: {v}" for k, v in problems.items())
        return None

    async def _callback(self, request: web.Request) -> web.Response:
        """Create Interaction Response: once, within 3 s of the dispatch."""
        failure, (body, _) = await self._begin(request, "callback", bot_auth=False)
        if failure is not None:
            return failure
        unknown = _json({"message": "Unknown interaction", "code": 10062}, 404)
        with self._state_lock:
            interaction = self.interactions.get(request.match_info["iid"])
            if interaction is None or interaction.token != request.match_info["token"]:
                return unknown
            interaction.callback_attempts += 1
            if interaction.callback_type is not None:
                return _json({"message": "Interaction has already been acknowledged.", "code": 40060}, 400)
            age = time.monotonic() - interaction.dispatched_at
            if age > ACK_WINDOW_SECONDS:
                return unknown
            body = body if isinstance(body, dict) else {}
            kind, data = body.get("type"), body.get("data") or {}
            allowed = [CALLBACK_MESSAGE, CALLBACK_DEFERRED]
            if interaction.kind == INTERACTION_COMPONENT:
                allowed += [CALLBACK_DEFERRED_UPDATE, CALLBACK_UPDATE]
            if kind not in allowed:
                return self._form_error({"type": "INTERACTION_CALLBACK_TYPE_INVALID"})
            problem = self._content_problem(data)
            if problem is not None:
                return self._form_error({"data": problem})
            if kind == CALLBACK_MESSAGE and not (data.get("content") or data.get("embeds")):
                return _json({"message": "Cannot send an empty message", "code": 50006}, 400)
            flags = int(data.get("flags") or 0) & EPHEMERAL
            if kind in (CALLBACK_DEFERRED_UPDATE, CALLBACK_UPDATE):
                # The pressed message becomes the interaction's original; 7 edits it right away.
                interaction.callback_type, interaction.callback_after = kind, age
                interaction.original = interaction.message_id
                pressed = self.messages.get(interaction.message_id or "")
                if kind == CALLBACK_UPDATE and pressed is not None:
                    if "content" in data:
                        pressed.history.append(data["content"] or "")
                    if "components" in data:
                        pressed.set_components(data["components"])
                if kind == CALLBACK_DEFERRED_UPDATE or pressed is None:
                    if request.query.get("with_response") not in ("1", "true", "True"):
                        return web.Response(status=204)
                    return _json({"interaction": {"id": interaction.id, "type": interaction.kind}})
                message = pressed
            else:
                message = self._response_message(interaction, data, flags)
                message.loading = kind == CALLBACK_DEFERRED
                if message.loading:
                    message.history = []
                interaction.callback_type, interaction.callback_after = kind, age
            interaction.ephemeral, interaction.original = bool(flags), message.id
        if request.query.get("with_response") not in ("1", "true", "True"):
            return web.Response(status=204)
        result = {
            "interaction": {
                "id": interaction.id,
                "type": interaction.kind,
                "response_message_id": message.id,
                "response_message_loading": message.loading,
                "response_message_ephemeral": message.ephemeral,
            },
            "resource": {"type": kind, "message": self._webhook_message(message)},
        }
        return _json(result)

    def _webhook_message(self, message: FakeMessage) -> dict[str, Any]:
        body = self._message_object(message, {"flags": message.flags | (1 << 7 if message.loading else 0)})
        interaction = self.interactions.get(message.interaction or "")
        if interaction is None:  # an ordinary message (e.g. the pressed one, edited through @original)
            return body
        body["webhook_id"] = self.bot_id
        body["application_id"] = self.bot_id
        body["type"] = 20 if interaction.kind == INTERACTION_COMMAND else 0  # CHAT_INPUT_COMMAND / DEFAULT
        metadata: dict[str, Any] = {
            "id": interaction.id,
            "type": interaction.kind,
            "user": self.user(interaction.user_id),
            "authorizing_integration_owners": {"0": interaction.guild_id or "0"},
        }
        if message.id != interaction.original:  # Discord names the original on followups only
            metadata["original_response_message_id"] = interaction.original
        if interaction.message_id is not None:
            metadata["interacted_message_id"] = interaction.message_id
        body["interaction_metadata"] = metadata
        return body

    def _webhook_interaction(self, request: web.Request) -> FakeInteraction | web.Response:
        """The interaction an interaction-webhook request's token names, or Discord's answer when there
        is none to act on (unknown, token expired, not answered yet). Call with the state lock held."""
        interaction = self._interaction_for_token(request.match_info["app"], request.match_info["token"])
        problem = self._webhook_problem(interaction)
        if problem is not None:
            return problem
        assert interaction is not None
        return interaction

    def _webhook_problem(self, interaction: FakeInteraction | None) -> web.Response | None:
        if interaction is None:
            return _json({"message": "Unknown Webhook", "code": 10015}, 404)
        if time.monotonic() - interaction.dispatched_at > TOKEN_LIFETIME_SECONDS:
            return _json({"message": "Invalid Webhook Token", "code": 50027}, 401)
        if interaction.callback_type is None:  # nothing to follow up on before the first callback
            return _json({"message": "Unknown Webhook", "code": 10015}, 404)
        return None

    async def _original(self, request: web.Request) -> web.Response:
        """Get / Edit / Delete Original Interaction Response."""
        failure, (body, _) = await self._begin(request, "original", bot_auth=False)
        if failure is not None:
            return failure
        with self._state_lock:
            interaction = self._webhook_interaction(request)
            if isinstance(interaction, web.Response):
                return interaction
            message = self.messages.get(interaction.original or "")
            if message is None:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            if request.method == "DELETE":
                del self.messages[message.id]
                interaction.original = None
                return web.Response(status=204)
            if request.method == "PATCH":
                return self._edit_webhook_message(message, body)
            return _json(self._webhook_message(message))

    def _edit_webhook_message(self, message: FakeMessage, body: Any) -> web.Response:
        """Edit Original Interaction Response and Edit Followup Message: both are Discord's Edit Webhook
        Message, the same fields checked and applied the same way (``flags`` cannot change)."""
        body = body if isinstance(body, dict) else {}
        problem_text = self._content_problem({k: v for k, v in body.items() if k != "flags"})
        if problem_text is not None:
            return self._form_error({"content": problem_text})
        if "content" in body:
            message.history.append(body["content"] or "")
            message.loading = False
        if "components" in body:
            message.set_components(body["components"])
        message.allowed_mentions.append(body.get("allowed_mentions"))
        return _json(self._webhook_message(message))

    async def _followup(self, request: web.Request) -> web.Response:
        """Create Followup Message; after a deferral the first one fills the "thinking" original."""
        failure, (body, files) = await self._begin(request, "followup", bot_auth=False)
        if failure is not None:
            return failure
        with self._state_lock:
            interaction = self._webhook_interaction(request)
            if isinstance(interaction, web.Response):
                return interaction
            body = body if isinstance(body, dict) else {}
            problem_text = self._content_problem(body)
            if problem_text is not None:
                return self._form_error({"content": problem_text})
            if not (body.get("content") or body.get("embeds") or files):
                return _json({"message": "Cannot send an empty message", "code": 50006}, 400)
            original = self.messages.get(interaction.original or "")
            if original is not None and original.loading:
                original.history.append(body.get("content") or "")
                original.allowed_mentions.append(body.get("allowed_mentions"))
                if "components" in body:
                    original.set_components(body["components"])
                original.loading = False
                original.files.update(files)
                message = original
            else:
                message = self._response_message(interaction, body, int(body.get("flags") or 0) & EPHEMERAL)
                message.files = files
                interaction.followups.append(message.id)
        if request.query.get("wait") not in ("1", "true", "True"):
            return web.Response(status=204)
        return _json(self._webhook_message(message))

    async def _followup_edit(self, request: web.Request) -> web.Response:
        """Edit Followup Message (also the original, by its id)."""
        failure, (body, _) = await self._begin(request, "followup_edit", bot_auth=False)
        if failure is not None:
            return failure
        with self._state_lock:
            interaction = self._webhook_interaction(request)
            if isinstance(interaction, web.Response):
                return interaction
            message = self.messages.get(request.match_info["mid"])
            if message is None or message.interaction != interaction.id:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            return self._edit_webhook_message(message, body)

    # --- gateway ----------------------------------------------------------------------------------
    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self.gateway_down:
            return web.Response(status=503, text="gateway unavailable")
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        query = dict(request.query)
        self.gateway_queries.append(query)
        compress = query.get("compress")
        conn = _Connection(ws, compress)
        if compress == "zlib-stream":
            conn.zlib_ctx = zlib.compressobj()
        elif compress == "zstd-stream" and zstandard is not None:
            conn.zstd_ctx = zstandard.ZstdCompressor().compressobj()
        elif compress:
            await ws.close(code=4000, message=b"unsupported compression")
            return ws
        self._connections.append(conn)
        try:
            await self._send_frame(conn, {"op": OP_HELLO, "d": {"heartbeat_interval": 41250}})
            async for frame in ws:
                if frame.type.name != "TEXT":
                    continue
                await self._on_gateway_frame(conn, json.loads(frame.data))
        finally:
            if conn in self._connections:
                self._connections.remove(conn)
        return ws

    async def _on_gateway_frame(self, conn: _Connection, payload: dict[str, Any]) -> None:
        op, data = payload.get("op"), payload.get("d")
        if op == OP_HEARTBEAT:
            await self._send_frame(conn, {"op": OP_HEARTBEAT_ACK, "d": None})
        elif op == OP_IDENTIFY:
            if (data or {}).get("token") != self.token:
                await conn.ws.close(code=4004, message=b"Authentication failed.")
                return
            if (
                not self.message_content_intent
                and int((data or {}).get("intents") or 0) & MESSAGE_CONTENT_INTENT
            ):
                await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
                return
            self.identifies.append(data)
            conn.session_id = f"session-{self.new_id()}"
            conn.identified = True
            ready = {
                "v": 10,
                "user": self.bot_user,
                "guilds": [{"id": g, "unavailable": True} for g in self.guilds],
                "session_id": conn.session_id,
                "resume_gateway_url": self.gateway_url,
                "application": {"id": self.bot_id, "flags": MESSAGE_CONTENT_INTENT_FLAG},
                "private_channels": [],
                "relationships": [],
                "shard": [0, 1],
            }
            await self._dispatch_to(conn, "READY", ready)
            for guild_id in self.guilds:
                await self._dispatch_to(conn, "GUILD_CREATE", self._guild_object(guild_id))
        elif op == OP_RESUME and self.refuse_resume:
            self.resumes.append(data or {})
            await self._send_frame(conn, {"op": OP_INVALID_SESSION, "d": False})
        elif op == OP_RESUME:
            self.resumes.append(data or {})
            conn.session_id = (data or {}).get("session_id") or conn.session_id
            conn.sequence = int((data or {}).get("seq") or 0)
            conn.identified = True
            await self._dispatch_to(conn, "RESUMED", {})

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        for conn in list(self._connections):
            if conn.identified and not conn.ws.closed:
                try:
                    await self._dispatch_to(conn, event, data)
                except ConnectionError:  # a client that died this instant just misses the event
                    continue

    async def _dispatch_to(self, conn: _Connection, event: str, data: dict[str, Any]) -> None:
        conn.sequence += 1
        await self._send_frame(conn, {"op": OP_DISPATCH, "t": event, "s": conn.sequence, "d": data})

    async def _send_frame(self, conn: _Connection, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        if conn.zlib_ctx is not None:
            await conn.ws.send_bytes(conn.zlib_ctx.compress(raw) + conn.zlib_ctx.flush(zlib.Z_SYNC_FLUSH))
        elif conn.zstd_ctx is not None:
            flush_block = zstandard.COMPRESSOBJ_FLUSH_BLOCK
            await conn.ws.send_bytes(conn.zstd_ctx.compress(raw) + conn.zstd_ctx.flush(flush_block))
        else:
            await conn.ws.send_str(raw.decode())


__all__ = ["FakeDiscord", "FakeInteraction", "FakeMessage"]
