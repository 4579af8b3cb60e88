"""A fake Slack: Web API methods plus a Socket Mode websocket, on 127.0.0.1, recording everything.

Point the real slack-sdk / slack-bolt at it and drive it from a test (or by hand)::

    with FakeSlack() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        # … start the bot; it calls apps.connections.open and connects to slack.ws_url
        await slack.wait_connected()
        slack.dm("U1", "hello")                      # a DM event, delivered over Socket Mode
        slack.mention("C1", "U1", "what's up?")      # an app_mention in a channel
        slack.slash_command("/switchboard", "status", user="U1", channel="C9")  # answered via response_url
        slack.fail_next("chat.update", "ratelimited", retry_after=1)
        slack.drop_socket()                          # server-side close: the bot must reconnect
        slack.channel_messages("D…")                  # what a user sees, with each edit's history

Every Web API call is kept in ``calls`` (method, arguments, token); every envelope sent in
``envelopes`` and every acknowledgement in ``acks``. Messages only one person sees (``chat.postEphemeral``
and ephemeral ``response_url`` responses) are kept apart in ``ephemerals``, never in ``messages``;
each slash command's ``response_url`` counts its uses and expires like Slack's (5 responses, 30 minutes).

Redelivery, as Slack does it: an ``events_api`` envelope that is not acknowledged within ``ack_timeout``
(Slack: 3 s) is sent again with the same payload and a new ``envelope_id``, carrying ``retry_attempt``
(1, 2, 3) and ``retry_reason: "timeout"``. Slack retries three times, the first right away, then after
about a minute and five minutes (``retry_delays``); after that the event is given up (``given_up``).
A retry due while no app is connected waits for the next connection, which is how an event survives
the app's restart here. ``send_event(..., redeliver=False)`` sends one envelope and never retries it. Messages posted by the bot are kept per channel with
their update history. Tokens are checked: the bot token for Web API calls and file downloads, the
app-level token for ``apps.connections.open``.

Buttons (Block Kit): ``chat.postMessage`` / ``chat.update`` check ``blocks`` as Slack documents them
(section text ≤ 3,000 characters, an actions block 1-25 elements, a button's plain_text ≤ 75 characters,
``value`` ≤ 2,000, ``action_id`` unique in its block, ``style`` primary/danger, ≤ 50 blocks) and answer
``invalid_blocks`` otherwise; ``text`` past 40,000 characters is ``msg_too_long``. ``chat.update`` keeps
a message's blocks unless it is given ``blocks`` (``[]`` removes them). ``press(channel, ts, label,
user=…)`` is a person clicking a button the message shows: an ``interactive`` envelope with a
``block_actions`` payload (its own ``trigger_id`` and ``response_url``) over Socket Mode, sent again
with a new ``envelope_id`` while it is not acknowledged; ``redeliver_press`` sends the same payload
again by hand (an ack that never reached Slack).

Rate limits as Slack counts them: per method per workspace at each tier's documented floor
(``METHOD_LIMITS``: ``chat.update`` Tier 3, 50 calls in any trailing 60 s; ``chat.postEphemeral`` and the ``files.*`` methods Tier 4, 100) and ``chat.postMessage`` per channel
("1 per second per channel": 60 in any trailing 60 s, ``CHANNEL_LIMITS``); the call past a limit answers
HTTP 429 ``ratelimited`` with a ``Retry-After`` header (``method_limits`` / ``channel_limits`` to tighten
or drop one). A method the fake does not implement answers ``unknown_method``, as Slack does for a
method it does not have; ``chat.update`` of a person's message is ``cant_update_message``.

State lives on the server's thread; reads go through a lock and the ``wait_*`` helpers poll, so a test on
another event loop (or a blocking SDK) can use them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import WSMsgType, web

from tests.fakes.server import ThreadedServer

TEAM_ID = "T0FAKE"
#: chat.startStream / appendStream / stopStream: ``markdown_text`` is limited to 12,000 characters.
STREAM_TEXT_LIMIT = 12_000
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
APP_ID = "A0APP"
#: A slash command's response_url takes at most 5 responses, within 30 minutes of the command.
RESPONSE_URL_USES = 5
RESPONSE_URL_TTL = 30 * 60
#: Slack wants an envelope acknowledged within 3 seconds, else it counts the delivery as failed.
ACK_TIMEOUT = 3.0
#: Pause before each of Slack's three retries (right away, after about 1 minute, after about 5 minutes).
RETRY_DELAYS = (0.0, 60.0, 300.0)
#: Rate limits enforced, as Slack counts them: per method per workspace per app, (calls, per seconds).
#: Slack's tiers are floors ("Tier 3: 50+ per minute"); the fake allows exactly the floor in any trailing
#: 60 s, so code that stays under it here stays under it on Slack. Tier 2: 20, Tier 3: 50, Tier 4: 100.
#: Not limited here: ``auth.test`` and ``assistant.threads.setStatus`` (special tiers without published
#: numbers) and ``apps.connections.open`` (Tier 1, "1+
#: per minute": a floor the SDK's reconnects in these tests pass on purpose, and Slack tolerates bursts).
METHOD_LIMITS: dict[str, tuple[int, float]] = {
    "chat.update": (50, 60.0),  # Tier 3
    "chat.postEphemeral": (100, 60.0),  # Tier 4
    "files.info": (100, 60.0),  # Tier 4
    "files.getUploadURLExternal": (100, 60.0),  # Tier 4
    "files.completeUploadExternal": (100, 60.0),  # Tier 4
}
#: Limits per channel: ``chat.postMessage`` is "1 per second per channel, short bursts allowed"; the burst
#: size is not documented, so the fake allows 60 posts to one channel in any trailing 60 s.
CHANNEL_LIMITS: dict[str, tuple[int, float]] = {"chat.postMessage": (60, 60.0)}
#: Block Kit limits (docs.slack.dev/reference/block-kit/…).
MAX_BLOCKS = 50
SECTION_TEXT_LIMIT = 3000
MAX_ACTION_ELEMENTS = 25
BUTTON_TEXT_LIMIT = 75
BUTTON_VALUE_LIMIT = 2000
ID_LIMIT = 255  # block_id, action_id
#: chat.postMessage / chat.update: ``text`` longer than this is ``msg_too_long``.
MESSAGE_TEXT_LIMIT = 40_000


@dataclass
class ApiCall:
    method: str
    args: dict[str, Any]
    token: str | None
    #: The error the fake answered with (``None`` for success).
    error: str | None = None
    #: Wall-clock time the call arrived (for benchmarks: time to first visible text).
    at: float = field(default_factory=time.time)


@dataclass
class FakeMessage:
    """A message in the fake workspace, with every text it had (``history[-1]`` is current)."""

    channel: str
    ts: str
    user: str
    thread_ts: str | None = None
    history: list[str] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    #: "streaming" between chat.startStream and chat.stopStream, "stopped" after; None for a plain post.
    stream: str | None = None
    #: The Block Kit blocks it shows now (as stored, with the block_ids Slack filled in).
    blocks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.history[-1] if self.history else ""

    @property
    def buttons(self) -> list[dict[str, Any]]:
        """Every button the message shows now (elements of its actions blocks)."""
        return [
            element
            for block in self.blocks
            if block.get("type") == "actions"
            for element in block.get("elements", [])
            if element.get("type") == "button"
        ]

    @property
    def labels(self) -> list[str]:
        """The buttons' texts, as a person sees them."""
        return [str(b["text"]["text"]) for b in self.buttons]

    @property
    def updates(self) -> int:
        return max(0, len(self.history) - 1)


@dataclass
class Failure:
    error: str
    retry_after: float | None
    status: int


@dataclass
class Ephemeral:
    """A message only ``user`` sees (``chat.postEphemeral``, or an ephemeral ``response_url`` response)."""

    channel: str
    user: str
    via: str  # "chat.postEphemeral" | "response_url"
    thread_ts: str | None = None
    history: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.history[-1] if self.history else ""


@dataclass
class SlashResponse:
    """One request to a response_url, as received (also the refused ones: ``error`` is set)."""

    text: str
    response_type: str
    replace_original: bool
    error: str | None = None


@dataclass
class ResponseUrl:
    """A slash command's response_url: who may see what it posts, how often it was used, its age."""

    key: str
    channel: str
    user: str
    command: str
    created: float = field(default_factory=time.time)
    uses: int = 0
    requests: list[SlashResponse] = field(default_factory=list)
    #: The newest message posted through it (what ``replace_original`` replaces); for a button's
    #: response_url that is first the message the button is on.
    last: FakeMessage | Ephemeral | None = None
    #: A button's response_url answers in the thread of the message the button is on.
    thread_ts: str | None = None


class FakeSlack(ThreadedServer):
    def __init__(
        self,
        *,
        bot_token: str = "xoxb-fake-bot-token",
        app_token: str = "xapp-1-fake-app",
        ack_timeout: float = ACK_TIMEOUT,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
        response_url_ttl: float = RESPONSE_URL_TTL,
    ) -> None:
        super().__init__()
        self.response_url_ttl = response_url_ttl
        self.ack_timeout = ack_timeout
        self.retry_delays = retry_delays
        #: event ids whose every delivery went unacknowledged (Slack stops retrying them).
        self.given_up: list[str] = []
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id, self.bot_user_id, self.bot_id = TEAM_ID, BOT_USER_ID, BOT_ID
        self.calls: list[ApiCall] = []
        self.envelopes: list[dict[str, Any]] = []
        self.acks: list[dict[str, Any]] = []
        self.messages: dict[str, dict[str, FakeMessage]] = {}
        self.uploads: dict[str, dict[str, Any]] = {}  # file id → {filename, length, data, …}
        self.hosted_files: dict[str, tuple[str, bytes, str]] = {}  # file id → (name, data, mime)
        self.connections_opened = 0
        self.hellos_sent = 0
        self._sockets: list[web.WebSocketResponse] = []
        self._failures: dict[str, list[Failure]] = {}
        #: (calls, window) per method; a test may tighten or drop an entry before the bot starts.
        self.method_limits: dict[str, tuple[int, float]] = dict(METHOD_LIMITS)
        #: (calls, window) per method per channel (``chat.postMessage``).
        self.channel_limits: dict[str, tuple[int, float]] = dict(CHANNEL_LIMITS)
        self._accepted: dict[tuple[str, str], deque[float]] = {}  # (team, method) → when each call came
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        #: (channel, ts) of every message people wrote, so thread_ts can be checked like Slack does.
        self.user_messages: set[tuple[str, str]] = set()
        #: Channels the bot is not a member of: chat.postMessage, chat.postEphemeral and chat.startStream
        #: answer ``not_in_channel`` (a slash command's response_url still works there).
        self.not_joined: set[str] = set()
        #: DMs between people (not with the bot): the bot's token cannot see them (``channel_not_found``).
        self.foreign_dms: set[str] = set()
        #: Known members per channel; chat.postEphemeral to anyone else is ``user_not_in_channel``.
        self.members: dict[str, set[str]] = {}
        #: Every message only one person sees, oldest first.
        self.ephemerals: list[Ephemeral] = []
        #: Every slash command's response_url by its key (the last path segment).
        self.response_urls: dict[str, ResponseUrl] = {}
        self._response_url_by_envelope: dict[str, str] = {}
        #: Every assistant.threads.setStatus, as (channel_id, thread_ts, status).
        self.statuses: list[tuple[str, str, str]] = []
        #: Every button press (the block_actions payload), in the order people clicked.
        self.presses: list[dict[str, Any]] = []
        #: Envelope ids of press deliveries not acknowledged within ack_timeout (Slack shows the
        #: person a warning that the app did not respond).
        self.unacked_presses: list[str] = []

    # --- addresses -------------------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        """The Web API root to give ``AsyncWebClient(base_url=…)`` (with its trailing slash)."""
        return f"{self.url}/api/"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/socket"

    # --- routes ----------------------------------------------------------------------------------
    def setup_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        app.router.add_get("/socket", self._socket)
        app.router.add_route("*", "/response/{key}", self._response)

    def _next_ts(self) -> str:
        n = next(self._ts)
        return f"{1_700_000_000 + n}.{n:06d}"

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args = await _read_args(request)
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() or args.pop("token", None)
        call = ApiCall(method, args, token)
        with self._lock:
            self.calls.append(call)
            queue = self._failures.get(method)
            failure = queue.pop(0) if queue else None
        self.record({"method": method, "args": args})
        if failure is not None:
            call.error = failure.error
            headers = (
                {"Retry-After": str(int(failure.retry_after))} if failure.retry_after is not None else {}
            )
            return web.json_response(
                {"ok": False, "error": failure.error}, status=failure.status, headers=headers
            )
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != expected:
            call.error = "invalid_auth"
            return web.json_response({"ok": False, "error": "invalid_auth"})
        retry_after = self._over_limit(method, str(args.get("channel") or args.get("channel_id") or ""))
        if retry_after is not None:
            call.error = "ratelimited"
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": str(retry_after)}
            )
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        body: dict[str, Any] = (
            handler(args)
            if handler is not None
            else {"ok": False, "error": "unknown_method", "req_method": method}
        )
        call.error = None if body.get("ok") else body.get("error")
        return web.json_response(body)

    def _over_limit(self, method: str, channel: str) -> int | None:
        """Slack's rate limiting: None when the call may go on, else the whole seconds to wait.

        Like Slack, a refused call answers HTTP 429 ``{"ok": false, "error": "ratelimited"}`` with a
        ``Retry-After`` header, and only calls that were let through count against the window. A call
        counts against its method's workspace limit and, for ``chat.postMessage``, its channel's.
        """
        scopes = []
        if method in self.method_limits:
            scopes.append(((self.team_id, method), self.method_limits[method]))
        if method in self.channel_limits:
            scopes.append(((channel, method), self.channel_limits[method]))
        now = time.monotonic()
        with self._lock:
            for key, (calls, window) in scopes:
                times = self._accepted.setdefault(key, deque())
                while times and times[0] <= now - window:
                    times.popleft()
                if len(times) >= calls:
                    return max(1, math.ceil(times[0] + window - now))
            for key, _limit in scopes:
                self._accepted[key].append(now)
        return None

    # Web API methods: each returns the JSON body -------------------------------------------------
    def _m_auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.com/",
            "team": "Fake Team",
            "user": "switchboard",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _m_apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"{self.ws_url}?ticket={uuid.uuid4().hex}"}

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        if not channel or channel in self.foreign_dms:
            return {"ok": False, "error": "channel_not_found"}
        if channel in self.not_joined:
            return {"ok": False, "error": "not_in_channel"}
        text = str(args.get("text") or "")
        if not text and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        if len(text) > MESSAGE_TEXT_LIMIT:
            return {"ok": False, "error": "msg_too_long"}
        blocks, problem = _check_blocks(args.get("blocks"))
        if problem is not None:
            return problem
        ts = self._next_ts()
        message = FakeMessage(channel, ts, self.bot_user_id, args.get("thread_ts") or None, [text])
        message.blocks = blocks
        with self._lock:
            self.messages.setdefault(channel, {})[ts] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": {"text": text, "ts": ts}}

    def _m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        """``channel``, ``user`` and ``text`` (or ``blocks``) required; the bot and the user must both be
        in the channel. Answers ``message_ts`` (an ephemeral message cannot be updated later)."""
        channel, user = str(args.get("channel") or ""), str(args.get("user") or "")
        if not channel or channel in self.foreign_dms:
            return {"ok": False, "error": "channel_not_found"}
        if not user:
            return {"ok": False, "error": "invalid_arguments"}
        if channel in self.not_joined:
            return {"ok": False, "error": "not_in_channel"}
        members = self.members.get(channel)
        if members is not None and user not in members:
            return {"ok": False, "error": "user_not_in_channel"}
        text = str(args.get("text") or "")
        if not text and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        if len(text) > MESSAGE_TEXT_LIMIT:
            return {"ok": False, "error": "msg_too_long"}
        _blocks, problem = _check_blocks(args.get("blocks"))
        if problem is not None:
            return problem
        ephemeral = Ephemeral(channel, user, "chat.postEphemeral", args.get("thread_ts") or None, [text])
        with self._lock:
            self.ephemerals.append(ephemeral)
        return {"ok": True, "message_ts": self._next_ts()}

    def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        """``channel`` and ``ts`` required; only the bot's own messages can be updated (a person's
        message is ``cant_update_message``, an unknown ts ``message_not_found``)."""
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        if not channel or channel in self.foreign_dms:
            return {"ok": False, "error": "channel_not_found"}
        with self._lock:
            message = self.messages.get(channel, {}).get(ts)
            if message is None and (channel, ts) in self.user_messages:
                return {"ok": False, "error": "cant_update_message"}
            if message is None:
                return {"ok": False, "error": "message_not_found"}
            if message.user != self.bot_user_id:
                return {"ok": False, "error": "cant_update_message"}
            text = str(args.get("text") or "")
            if len(text) > MESSAGE_TEXT_LIMIT:
                return {"ok": False, "error": "msg_too_long"}
            if "blocks" in args:  # without the field Slack keeps the message's blocks; [] removes them
                blocks, problem = _check_blocks(args.get("blocks"))
                if problem is not None:
                    return problem
                message.blocks = blocks
            if not text and not message.blocks:
                return {"ok": False, "error": "no_text"}
            message.history.append(text)
        return {"ok": True, "channel": channel, "ts": ts, "text": message.text}

    # Streaming (docs.slack.dev/reference/methods/chat.startStream, appendStream, stopStream) ----------
    def _thread_exists(self, channel: str, thread_ts: str) -> bool:
        return (channel, thread_ts) in self.user_messages or thread_ts in self.messages.get(channel, {})

    def _m_chat_startStream(self, args: dict[str, Any]) -> dict[str, Any]:
        """``channel`` and ``thread_ts`` required; outside a DM also ``recipient_user_id`` and
        ``recipient_team_id``; ``markdown_text`` at most 12,000 characters."""
        channel, thread_ts = str(args.get("channel") or ""), str(args.get("thread_ts") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if channel in self.not_joined:
            return {"ok": False, "error": "not_in_channel"}
        if not thread_ts or not self._thread_exists(channel, thread_ts):
            return {"ok": False, "error": "invalid_thread_ts"}
        if not channel.startswith("D") and not (
            args.get("recipient_user_id") and args.get("recipient_team_id")
        ):
            return {"ok": False, "error": "invalid_arguments"}
        text = str(args.get("markdown_text") or "")
        if len(text) > STREAM_TEXT_LIMIT:
            return {"ok": False, "error": "msg_too_long"}
        ts = self._next_ts()
        message = FakeMessage(channel, ts, self.bot_user_id, thread_ts, [text], stream="streaming")
        with self._lock:
            self.messages.setdefault(channel, {})[ts] = message
        return {"ok": True, "channel": channel, "ts": ts}

    def _streaming(self, args: dict[str, Any]) -> tuple[FakeMessage | None, str | None]:
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        message = self.messages.get(channel, {}).get(ts)
        if message is None:
            return None, "message_not_found"
        if message.user != self.bot_user_id:
            return None, "message_not_owned_by_app"
        if message.stream != "streaming":
            return None, "message_not_in_streaming_state"
        return message, None

    def _m_chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any]:
        """``channel``, ``ts`` and ``markdown_text`` required; the message must still be streaming."""
        text = str(args.get("markdown_text") or "")
        with self._lock:
            message, error = self._streaming(args)
            if message is None:
                return {"ok": False, "error": error}
            if not text:
                return {"ok": False, "error": "invalid_arguments"}
            if len(text) > STREAM_TEXT_LIMIT:
                return {"ok": False, "error": "msg_too_long"}
            message.history.append(message.text + text)
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def _m_chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any]:
        """Ends the stream (optionally appending a last ``markdown_text``); the message then stays."""
        text = str(args.get("markdown_text") or "")
        with self._lock:
            message, error = self._streaming(args)
            if message is None:
                return {"ok": False, "error": error}
            if len(text) > STREAM_TEXT_LIMIT:
                return {"ok": False, "error": "msg_too_long"}
            if text:
                message.history.append(message.text + text)
            message.stream = "stopped"
        return {"ok": True, "channel": message.channel, "ts": message.ts, "message": {"text": message.text}}

    def _m_assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        """``channel_id``, ``thread_ts`` and ``status`` required (an empty status clears it)."""
        channel, thread_ts = str(args.get("channel_id") or ""), str(args.get("thread_ts") or "")
        if not channel or "status" not in args:
            return {"ok": False, "error": "invalid_arguments"}
        if not thread_ts or not self._thread_exists(channel, thread_ts):
            return {"ok": False, "error": "invalid_thread_ts"}
        with self._lock:
            self.statuses.append((channel, thread_ts, str(args["status"])))
        return {"ok": True}

    def _m_conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        return {"ok": True, "channel": {"id": channel, "is_im": channel.startswith("D")}}

    def _m_files_info(self, args: dict[str, Any]) -> dict[str, Any]:
        file_id = str(args.get("file") or "")
        if file_id not in self.hosted_files:
            return {"ok": False, "error": "file_not_found"}
        return {"ok": True, "file": self.file_object(file_id)}

    def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        """``filename`` and ``length`` (the size in bytes) required."""
        if not args.get("filename") or not str(args.get("length") or "").isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{next(self._ids):08d}"
        with self._lock:
            self.uploads[file_id] = {
                "filename": args.get("filename"),
                "length": int(args.get("length") or 0),
                "data": None,
                "completed": False,
            }
        return {"ok": True, "upload_url": f"{self.url}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        files = args.get("files")
        if isinstance(files, str):
            files = json.loads(files)
        if (
            not isinstance(files, list)
            or not files
            or not all(isinstance(f, dict) and f.get("id") for f in files)
        ):
            return {"ok": False, "error": "invalid_arguments"}  # ``files`` (each with an ``id``) is required
        channel = args.get("channel_id") or args.get("channels")
        out = []
        with self._lock:
            for item in files or []:
                upload = self.uploads.get(item.get("id"))
                if upload is None or upload["data"] is None:
                    return {"ok": False, "error": "file_not_found"}
                upload.update(completed=True, title=item.get("title"), channel=channel)
                upload["thread_ts"] = args.get("thread_ts")
                out.append({"id": item["id"], "name": upload["filename"], "title": item.get("title")})
            if channel:
                ts = self._next_ts()
                shared = FakeMessage(str(channel), ts, self.bot_user_id, args.get("thread_ts"), [""], out)
                self.messages.setdefault(str(channel), {})[ts] = shared
        return {"ok": True, "files": out}

    async def _response(self, request: web.Request) -> web.Response:
        """A POST to a slash command's response_url (JSON: ``text``, ``response_type``, ``replace_original``).

        As Slack documents it: no token, at most 5 responses within 30 minutes of the command;
        ``response_type`` ``"ephemeral"`` (the default) shows only the invoking user the message,
        ``"in_channel"`` everyone — also where the bot is not a member. ``replace_original: true``
        replaces the newest message this URL posted (keeping who can see it). Slack does not document
        the body it answers past a limit; the fake answers HTTP 404 ``used_url`` / ``expired_url``.
        """
        key = request.match_info["key"]
        with self._lock:
            state = self.response_urls.get(key)
        if request.method != "POST" or state is None:
            return web.Response(status=404, text="invalid_url")
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.Response(status=400, text="invalid_payload")
        text = str(body.get("text") or "")
        response_type = str(body.get("response_type") or "ephemeral")
        replace = bool(body.get("replace_original"))
        request_record = SlashResponse(text, response_type, replace)
        self.record({"response_url": key, "response_type": response_type, "replace_original": replace})
        with self._lock:
            state.requests.append(request_record)
            if time.time() - state.created > self.response_url_ttl:
                request_record.error = "expired_url"
                return web.Response(status=404, text="expired_url")
            if state.uses >= RESPONSE_URL_USES:
                request_record.error = "used_url"
                return web.Response(status=404, text="used_url")
            if response_type not in ("in_channel", "ephemeral"):
                request_record.error = "invalid_payload"
                return web.Response(status=400, text="invalid_payload")
            if not text and not body.get("blocks"):
                request_record.error = "no_text"
                return web.Response(status=400, text="no_text")
            state.uses += 1
            if replace and state.last is not None:
                state.last.history.append(text)
            elif response_type == "in_channel":
                ts = self._next_ts()
                message = FakeMessage(state.channel, ts, self.bot_user_id, state.thread_ts, [text])
                self.messages.setdefault(state.channel, {})[ts] = message
                state.last = message
            else:
                ephemeral = Ephemeral(state.channel, state.user, "response_url", state.thread_ts, [text])
                self.ephemerals.append(ephemeral)
                state.last = ephemeral
        return web.json_response({"ok": True})

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        data = await request.read()
        with self._lock:
            upload = self.uploads.get(file_id)
            if upload is None:
                return web.Response(status=404, text="no such upload")
            upload["data"] = data
        self.record({"upload": file_id, "bytes": len(data)})
        return web.Response(text=f"OK - {len(data)}")

    async def _download(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        self.record(
            {"download": request.match_info["file_id"], "authorized": auth == f"Bearer {self.bot_token}"}
        )
        if auth != f"Bearer {self.bot_token}":
            # Real Slack answers an unauthorised file URL with its HTML login page.
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        hosted = self.hosted_files.get(request.match_info["file_id"])
        if hosted is None:
            return web.Response(status=404)
        _name, data, mime = hosted
        return web.Response(body=data, content_type=mime)

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self._lock:
            self.connections_opened += 1
            self._sockets.append(ws)
        hello = {
            "type": "hello",
            "num_connections": len(self._sockets),
            "debug_info": {"host": "fake-slack", "approximate_connection_time": 3600},
            "connection_info": {"app_id": APP_ID},
        }
        await ws.send_str(json.dumps(hello))
        self.hellos_sent += 1
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                with self._lock:
                    self.acks.append(json.loads(msg.data))
        finally:
            with self._lock:
                if ws in self._sockets:
                    self._sockets.remove(ws)
        return ws

    # --- injection API ---------------------------------------------------------------------------
    def send_envelope(self, envelope_type: str, payload: dict[str, Any], retry_num: int = 0) -> str:
        """Push one Socket Mode envelope to the connected app; returns its ``envelope_id``."""
        envelope = self._envelope(envelope_type, payload, retry_num)
        self.call(lambda: self._push(envelope))
        return envelope["envelope_id"]

    def _envelope(self, envelope_type: str, payload: dict[str, Any], retry_num: int) -> dict[str, Any]:
        envelope: dict[str, Any] = {
            "envelope_id": str(uuid.uuid4()),
            "type": envelope_type,
            "payload": payload,
            "accepts_response_payload": envelope_type != "events_api",
        }
        if envelope_type == "events_api":
            envelope["retry_attempt"] = retry_num
            envelope["retry_reason"] = "timeout" if retry_num else ""
        return envelope

    async def _push(self, envelope: dict[str, Any]) -> None:
        """Runs on the server loop: send ``envelope`` on the newest connection and record it."""
        if not self._sockets:
            raise RuntimeError("no Socket Mode connection to deliver to")
        with self._lock:
            self.envelopes.append(envelope)
        await self._sockets[-1].send_str(json.dumps(envelope))

    async def _deliver_until_acked(self, payload: dict[str, Any], first: dict[str, Any]) -> None:
        """Runs on the server loop: Slack's retry policy for one Events API event."""
        envelope = first
        for attempt in range(len(self.retry_delays) + 1):
            if attempt:
                await asyncio.sleep(self.retry_delays[attempt - 1])
                while not self._sockets:  # the app is away (restarting): deliver when it is back
                    await asyncio.sleep(0.05)
                envelope = self._envelope("events_api", payload, attempt)
                try:
                    await self._push(envelope)
                except (RuntimeError, ConnectionError):
                    continue  # the socket closed under us: that attempt failed too
            await asyncio.sleep(self.ack_timeout)
            if self.acked(envelope["envelope_id"]):
                return
        with self._lock:
            self.given_up.append(str(payload.get("event_id")))

    def send_event(
        self,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        retry_num: int = 0,
        redeliver: bool = True,
    ) -> dict[str, Any]:
        """Deliver an Events API event, retried as Slack does until acked (unless ``redeliver=False``).

        Reuse ``event_id`` (and the same event) to send a retry by hand.
        """
        event_id = event_id or f"Ev{uuid.uuid4().hex[:10].upper()}"
        payload = {
            "token": "verification-token",
            "team_id": self.team_id,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [
                {"team_id": self.team_id, "user_id": self.bot_user_id, "is_bot": True, "enterprise_id": None}
            ],
            "is_ext_shared_channel": False,
        }
        envelope = self._envelope("events_api", payload, retry_num)

        async def push() -> None:
            await self._push(envelope)
            if redeliver:
                self.redeliver(self._deliver_until_acked(payload, envelope))

        self.call(push)
        return {"event_id": event_id, "envelope_id": envelope["envelope_id"], "event": event}

    def _user_event(
        self,
        event_type: str,
        channel: str,
        user: str,
        text: str,
        *,
        channel_type: str,
        thread_ts: str | None,
        files: list[dict[str, Any]] | None,
        user_team: str | None = None,
    ) -> dict[str, Any]:
        ts = self._next_ts()
        with self._lock:
            self.user_messages.add((channel, ts))
        event: dict[str, Any] = {
            "type": event_type,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel": channel,
            "team": self.team_id,
            "client_msg_id": str(uuid.uuid4()),
            "user_profile": {"display_name": user.lower(), "real_name": user},
        }
        if event_type == "message":
            event["channel_type"] = channel_type
        if user_team is not None:  # Slack Connect: a person of another organisation, in a shared channel
            event["user_team"] = user_team
            event["source_team"] = user_team
        if thread_ts:
            event["thread_ts"] = thread_ts
        if files:
            event["files"] = files
            if event_type == "message":
                event["subtype"] = "file_share"
        return event

    def dm(
        self,
        user: str,
        text: str,
        *,
        channel: str | None = None,
        thread_ts: str | None = None,
        files: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A person writes to the bot in a DM (``message.im``)."""
        channel = channel or f"D{user}"
        event = self._user_event(
            "message", channel, user, text, channel_type="im", thread_ts=thread_ts, files=files
        )
        return self.send_event(event)

    def mention(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        thread_ts: str | None = None,
        files: list[dict[str, Any]] | None = None,
        user_team: str | None = None,
    ) -> dict[str, Any]:
        """A person mentions the bot in a channel (``app_mention``; the text gets ``<@BOT>`` in front).

        ``user_team``: the person's own team, when it is not the bot's (Slack Connect)."""
        if f"<@{self.bot_user_id}>" not in text:
            text = f"<@{self.bot_user_id}> {text}"
        event = self._user_event(
            "app_mention",
            channel,
            user,
            text,
            channel_type="channel",
            thread_ts=thread_ts,
            files=files,
            user_team=user_team,
        )
        return self.send_event(event)

    def channel_message(
        self, channel: str, user: str, text: str, thread_ts: str | None = None
    ) -> dict[str, Any]:
        """A plain channel message (``message.channels``) that does not mention the bot."""
        event = self._user_event(
            "message", channel, user, text, channel_type="channel", thread_ts=thread_ts, files=None
        )
        return self.send_event(event)

    def slash_command(self, command: str, text: str, *, user: str, channel: str) -> str:
        """A slash command (``/switchboard status``) invoked in ``channel``; returns the envelope id.

        Slash commands work in any conversation, also one the bot is not in; the payload carries a
        fresh ``response_url`` (see :meth:`response_url`).
        """
        key = uuid.uuid4().hex
        with self._lock:
            self.response_urls[key] = ResponseUrl(key, channel, user, command)
        payload = {
            "token": "verification-token",
            "team_id": self.team_id,
            "channel_id": channel,
            "channel_name": "directmessage" if channel.startswith("D") else "general",
            "user_id": user,
            "user_name": user.lower(),
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "response_url": f"{self.url}/response/{key}",
            "trigger_id": f"{next(self._ids)}.{uuid.uuid4().hex[:8]}",
        }
        envelope_id = self.send_envelope("slash_commands", payload)
        with self._lock:
            self._response_url_by_envelope[envelope_id] = key
        return envelope_id

    def response_url(self, envelope_id: str) -> ResponseUrl:
        """The response_url of the slash command sent in ``envelope_id``."""
        with self._lock:
            return self.response_urls[self._response_url_by_envelope[envelope_id]]

    def age_response_url(self, envelope_id: str, seconds: float) -> None:
        """Make a slash command ``seconds`` older (past 30 minutes its response_url is expired)."""
        with self._lock:
            self.response_urls[self._response_url_by_envelope[envelope_id]].created -= seconds

    def ephemerals_for(self, user: str, channel: str | None = None) -> list[Ephemeral]:
        """Messages only ``user`` saw (optionally in one channel), oldest first."""
        with self._lock:
            return [e for e in self.ephemerals if e.user == user and channel in (None, e.channel)]

    def press(
        self, channel: str, ts: str, label: str, *, user: str, redeliver: bool = True
    ) -> dict[str, Any]:
        """``user`` clicks the button ``label`` on the bot's message ``ts``: a ``block_actions`` payload
        in an ``interactive`` envelope, as Slack sends it over Socket Mode.

        Refuses a button the message does not show (nobody can click what is gone). The payload has
        a fresh ``trigger_id`` and ``response_url`` (5 responses in 30 minutes, like a slash
        command's; ``replace_original`` replaces the message the button is on). Until acknowledged
        within ``ack_timeout`` the same payload is sent again with a new ``envelope_id`` (unless
        ``redeliver=False``). Returns ``{"envelope_id", "payload"}``.
        """
        with self._lock:
            message = self.messages.get(channel, {}).get(ts)
            if message is None:
                raise LookupError(f"no bot message {ts} in {channel}")
            found = [
                (block, element)
                for block in message.blocks
                if block.get("type") == "actions"
                for element in block.get("elements", [])
                if element.get("type") == "button" and element["text"]["text"] == label
            ]
            if not found:
                raise LookupError(f"message {ts} shows no button {label!r} (it shows: {message.labels})")
            block, button = found[0]
            key = uuid.uuid4().hex
            self.response_urls[key] = ResponseUrl(
                key, channel, user, "button", last=message, thread_ts=message.thread_ts
            )
        container: dict[str, Any] = {
            "type": "message",
            "message_ts": ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        source: dict[str, Any] = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "ts": ts,
            "text": message.text,
            "blocks": message.blocks,
        }
        if message.thread_ts:
            container["thread_ts"] = source["thread_ts"] = message.thread_ts
        pressed = {k: v for k, v in button.items() if k in ("type", "action_id", "text", "value", "style")}
        payload: dict[str, Any] = {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": self.team_id},
            "api_app_id": APP_ID,
            "token": "verification-token",
            "container": container,
            "trigger_id": f"{next(self._ids)}.{uuid.uuid4().hex[:12]}",
            "team": {"id": self.team_id, "domain": "fake"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": "directmessage" if channel.startswith("D") else "general"},
            "message": source,
            "state": {"values": {}},
            "response_url": f"{self.url}/response/{key}",
            "actions": [{**pressed, "block_id": block["block_id"], "action_ts": f"{time.time():.6f}"}],
        }
        with self._lock:
            self.presses.append(payload)
        envelope = self._envelope("interactive", payload, 0)

        async def push() -> None:
            await self._push(envelope)
            if redeliver:
                self.redeliver(self._press_until_acked(payload, envelope))

        self.call(push)
        return {"envelope_id": envelope["envelope_id"], "payload": payload}

    def redeliver_press(self, press: dict[str, Any]) -> str:
        """Send a press's payload again in a new envelope (its ack never reached Slack)."""
        return self.send_envelope("interactive", press["payload"])

    async def _press_until_acked(self, payload: dict[str, Any], first: dict[str, Any]) -> None:
        """Runs on the server loop: an unacknowledged press is sent again, at most len(retry_delays)."""
        envelope = first
        for attempt in range(len(self.retry_delays) + 1):
            if attempt:
                await asyncio.sleep(self.retry_delays[attempt - 1])
                while not self._sockets:
                    await asyncio.sleep(0.05)
                envelope = self._envelope("interactive", payload, 0)
                try:
                    await self._push(envelope)
                except (RuntimeError, ConnectionError):
                    continue
            await asyncio.sleep(self.ack_timeout)
            if self.acked(envelope["envelope_id"]):
                return
            with self._lock:
                self.unacked_presses.append(envelope["envelope_id"])

    def press_deliveries(self, press: dict[str, Any]) -> list[dict[str, Any]]:
        """Every envelope that carried this press (the same trigger_id), in the order sent."""
        trigger = press["payload"]["trigger_id"]
        with self._lock:
            return [e for e in self.envelopes if (e.get("payload") or {}).get("trigger_id") == trigger]

    def host_file(self, name: str, data: bytes, mime: str = "application/octet-stream") -> dict[str, Any]:
        """Make a private file available for download; returns the ``files[]`` item for an event."""
        file_id = f"F{next(self._ids):08d}"
        with self._lock:
            self.hosted_files[file_id] = (name, data, mime)
        return self.file_object(file_id)

    def host_audio_clip(self, data: bytes, seconds: float, mime: str = "audio/webm") -> dict[str, Any]:
        """An audio clip recorded in Slack's composer: a hosted file with ``subtype: slack_audio`` and
        its length in ``duration_ms``; returns the ``files[]`` item for an event."""
        item = self.host_file("audio_message.webm", data, mime)
        item.update(subtype="slack_audio", media_display_type="audio", duration_ms=int(seconds * 1000))
        return item

    def file_object(self, file_id: str) -> dict[str, Any]:
        name, data, mime = self.hosted_files[file_id]
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mime,
            "size": len(data),
            "mode": "hosted",
            "url_private": f"{self.url}/files/{file_id}/{name}",
            "url_private_download": f"{self.url}/files/{file_id}/{name}",
        }

    def request_refresh(self, reason: str = "refresh_requested") -> None:
        """Send Slack's routine ``disconnect`` message: the app must open a new connection."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-slack"}}

        async def push() -> None:
            await self._sockets[-1].send_str(json.dumps(message))

        self.call(push)

    def fail_next(
        self, method: str, error: str = "ratelimited", *, retry_after: float | None = 1, times: int = 1
    ) -> None:
        """Make the next ``times`` calls of a Web API method fail. ``ratelimited`` answers HTTP 429."""
        status = 429 if error == "ratelimited" else 200
        with self._lock:
            queue = self._failures.setdefault(method, [])
            queue.extend([Failure(error, retry_after if status == 429 else None, status)] * times)

    def drop_socket(self) -> int:
        """Close every Socket Mode connection from the server side; returns how many were closed."""

        async def close_all() -> int:
            sockets = list(self._sockets)
            for ws in sockets:
                await ws.close(code=1001, message=b"fake slack: going away")
            return len(sockets)

        return int(self.call(close_all))

    # --- views -----------------------------------------------------------------------------------
    def channel_messages(self, channel: str, thread_ts: str | None = None) -> list[FakeMessage]:
        """Messages the bot posted in ``channel`` (optionally only in one thread), oldest first."""
        with self._lock:
            found = list(self.messages.get(channel, {}).values())
        if thread_ts is not None:
            found = [m for m in found if m.thread_ts == thread_ts]
        return sorted(found, key=lambda m: float(m.ts))

    def calls_to(self, method: str) -> list[ApiCall]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def acked(self, envelope_id: str) -> bool:
        with self._lock:
            return any(a.get("envelope_id") == envelope_id for a in self.acks)

    def deliveries(self, event_id: str) -> list[dict[str, Any]]:
        """Every envelope that carried ``event_id``, in the order sent (the first, then retries)."""
        with self._lock:
            return [e for e in self.envelopes if (e.get("payload") or {}).get("event_id") == event_id]

    @property
    def connected(self) -> int:
        with self._lock:
            return len(self._sockets)

    async def wait_connected(self, count: int = 1, timeout: float = 30.0) -> None:
        """Wait until ``count`` sockets were opened in total and one is live (the app is listening)."""
        await self.wait_for(
            lambda: self.connections_opened >= count and self.connected > 0,
            timeout,
            f"Socket Mode connection #{count}",
        )

    def wait_connected_sync(self, count: int = 1, timeout: float = 30.0) -> None:
        """The same, for a blocking caller (a bot running on another thread or process)."""
        _poll(
            lambda: self.connections_opened >= count and self.connected > 0,
            timeout,
            "a Socket Mode connection",
        )

    async def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition"
    ) -> Any:
        """Poll ``predicate`` from an async test until it returns something truthy; return that."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.02)

    async def wait_for_text(
        self, needle: str, channel: str, *, thread_ts: str | None = None, timeout: float = 30.0
    ) -> FakeMessage:
        """Wait until a bot message in ``channel`` shows ``needle``; return that message."""

        def find() -> FakeMessage | None:
            return next((m for m in self.channel_messages(channel, thread_ts) if needle in m.text), None)

        return await self.wait_for(find, timeout, f"{needle!r} in {channel}")


def _invalid(reason: str) -> dict[str, Any]:
    """Slack's answer to blocks it cannot render: ``invalid_blocks`` and a reason per problem."""
    return {
        "ok": False,
        "error": "invalid_blocks",
        "errors": [reason],
        "response_metadata": {"messages": [f"[ERROR] {reason}"]},
    }


def _text_object(obj: Any, *, limit: int, plain_only: bool = False) -> str | None:
    """What is wrong with a text object, or None."""
    if not isinstance(obj, dict) or obj.get("type") not in ("plain_text", "mrkdwn"):
        return "must be a text object"
    if plain_only and obj["type"] != "plain_text":
        return "must be plain_text"
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return "text must be a non-empty string"
    if len(text) > limit:
        return f"must be less than {limit + 1} characters"
    return None


def _check_blocks(raw: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Validate ``blocks`` as Slack does; returns (the blocks with block_ids filled in, error body)."""
    if raw is None:
        return [], None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return [], {"ok": False, "error": "invalid_blocks_format"}
    if not isinstance(raw, list):
        return [], {"ok": False, "error": "invalid_blocks_format"}
    if len(raw) > MAX_BLOCKS:
        return [], _invalid(f"no more than {MAX_BLOCKS} items allowed [json-pointer:/blocks]")
    blocks: list[dict[str, Any]] = []
    block_ids: set[str] = set()
    for i, block in enumerate(raw):
        where = f"[json-pointer:/blocks/{i}]"
        if not isinstance(block, dict):
            return [], _invalid(f"must be an object {where}")
        block = json.loads(json.dumps(block))
        block_id = block.setdefault("block_id", uuid.uuid4().hex[:5])
        if not isinstance(block_id, str) or len(block_id) > ID_LIMIT or block_id in block_ids:
            return [], _invalid(f"block_id must be unique and at most {ID_LIMIT} characters {where}")
        block_ids.add(block_id)
        kind = block.get("type")
        if kind == "section":
            problem = _text_object(block.get("text"), limit=SECTION_TEXT_LIMIT)
            if problem and not block.get("fields"):
                return [], _invalid(f"{problem} [json-pointer:/blocks/{i}/text]")
        elif kind == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= MAX_ACTION_ELEMENTS:
                return [], _invalid(f"must have 1 to {MAX_ACTION_ELEMENTS} elements {where}")
            action_ids: set[str] = set()
            for j, element in enumerate(elements):
                at = f"[json-pointer:/blocks/{i}/elements/{j}]"
                if not isinstance(element, dict) or element.get("type") != "button":
                    return [], _invalid(f"the fake knows only button elements {at}")
                problem = _text_object(element.get("text"), limit=BUTTON_TEXT_LIMIT, plain_only=True)
                if problem:
                    return [], _invalid(f"{problem} {at[:-1]}/text]")
                action_id = element.setdefault("action_id", uuid.uuid4().hex[:5])
                if not isinstance(action_id, str) or len(action_id) > ID_LIMIT or action_id in action_ids:
                    return [], _invalid(f"action_id must be unique in the block {at}")
                action_ids.add(action_id)
                value = element.get("value")
                if value is not None and (not isinstance(value, str) or len(value) > BUTTON_VALUE_LIMIT):
                    return [], _invalid(f"value must be at most {BUTTON_VALUE_LIMIT} characters {at}")
                if element.get("style") not in (None, "primary", "danger"):
                    return [], _invalid(f"style must be primary or danger {at}")
        elif kind not in ("divider", "context", "header", "markdown", "rich_text", "image"):
            return [], _invalid(f"unsupported type {kind!r} {where}")
        blocks.append(block)
    return blocks, None


def _poll(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


async def _read_args(request: web.Request) -> dict[str, Any]:
    """Web API arguments arrive as a query string, form fields, multipart or JSON; merge them all."""
    args: dict[str, Any] = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        ctype = request.content_type
        if ctype == "application/json":
            args.update(await request.json())
        elif ctype == "application/x-www-form-urlencoded":
            args.update(parse_qsl((await request.read()).decode()))
        elif ctype.startswith("multipart/"):
            form = await request.post()
            args.update({k: v for k, v in form.items() if isinstance(v, str)})
    return args


def main() -> None:
    """By hand: ``python -m tests.fakes.slack [PORT]``, point a Switchboard at it, and type DMs.

    Lines typed here arrive as DMs from ``UDEV`` once the bot is connected (``@text`` mentions it in
    ``#CDEV`` instead); the bot's messages are printed as they are posted and updated.
    """
    import sys

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = FakeSlack()
    server.port = port
    server.start()
    print("Fake Slack running. Point Switchboard at it with:")
    print("  channels:\n    slack:\n      enabled: true")
    print(f"      bot_token: {server.bot_token}\n      app_token: {server.app_token}")
    print(f"      api_base_url: {server.api_url}")
    print("Type a line to DM the bot as UDEV ('@text' mentions it in CDEV); Ctrl-D to quit.")
    shown: dict[tuple[str, str], str] = {}
    try:
        for line in sys.stdin:
            text = line.rstrip("\n")
            if not server.connected:
                print("(no bot connected yet)")
                continue
            if text.startswith("@"):
                server.mention("CDEV", "UDEV", text[1:])
            elif text:
                server.dm("UDEV", text)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.5)
                changed = False
                for channel in ("DUDEV", "CDEV"):
                    for message in server.channel_messages(channel):
                        if shown.get((channel, message.ts)) != message.text:
                            shown[(channel, message.ts)] = message.text
                            changed = True
                            print(f"[{channel} {message.ts} v{len(message.history)}] {message.text}")
                if not changed and shown:
                    break
    finally:
        server.stop()


__all__ = [
    "BOT_USER_ID",
    "TEAM_ID",
    "ApiCall",
    "Ephemeral",
    "FakeMessage",
    "FakeSlack",
    "ResponseUrl",
    "SlashResponse",
]

if __name__ == "__main__":
    main()
