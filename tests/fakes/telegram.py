"""A fake Telegram Bot API server: real HTTP on 127.0.0.1, recording every call, with failure injection.

Point any Bot API client at it (python-telegram-bot: ``base_url=f"{fake.url}/bot"``,
``base_file_url=f"{fake.url}/file/bot"``). It implements the methods a chat bot needs — ``getMe``,
``deleteWebhook``, ``getUpdates`` (long polling with offsets), ``sendMessage``, ``editMessageText``,
``sendDocument``, ``sendPhoto``, ``sendVoice``, ``getFile``, ``sendChatAction``, ``setMyCommands``, ``sendMessageDraft``
(private chats only), ``setWebhook``/``deleteWebhook``/``getWebhookInfo`` … — and the file
download route ``/file/bot<token>/<path>``. Like the real one it validates ``parse_mode=HTML`` (unknown
or unbalanced tags → 400 "can't parse entities"), counts length after entity parsing (4096), and answers
"message is not modified" for an identical edit (same text *and* same keyboard).

Inline keyboards (``reply_markup`` on ``sendMessage`` / ``editMessageText``) are validated as the Bot API
documents them — every button has a label and exactly one action, ``callback_data`` is 1-64 bytes of
UTF-8 (else ``Bad Request: BUTTON_DATA_INVALID``) — and an ``editMessageText`` without ``reply_markup``
removes the keyboard, as Telegram does. ``tg.press(chat_id, message_id, "Stop", user_id=…)`` is a user
tapping a button: a ``callback_query`` update delivered like any other (redelivered until an ``offset``
confirms it), which the bot must answer with ``answerCallbackQuery`` (``tg.unanswered()`` lists the ones
it did not; answering an unknown or already answered query fails like Telegram's). Updates of a kind the
last ``allowed_updates`` (getUpdates or setWebhook) leaves out are never created, as on Telegram.

Driving it (from a test or a REPL)::

    with FakeTelegram() as tg:
        tg.user_message(42, "hello")                       # a private message from user 42
        tg.user_message(-100, "@switchboard_bot hi", chat_type="supergroup")
        tg.fail_next("editMessageText", status=429, retry_after=2)
        tg.fail_share(["editMessageText"], 0.3, when=lambda p: "reply_markup" not in p)  # 30 % of finals
        tg.conflict_on_getupdates = True                   # another poller holds the token
        tg.chat_messages(42)                               # what the chat shows, with edit history
        tg.press(42, reply.message_id, "⏹ Stop")           # a user taps an inline button
        tg.call_count("answerCallbackQuery")               # per-method call counts

Privacy mode is on by default, as BotFather sets it: in a group the bot gets only commands for it,
``@mentions`` of it and replies to it (tests/fakes/telegram_privacy.py has the documented rules), and
``getMe`` says ``can_read_all_group_messages: false``. ``FakeTelegram(privacy_mode=False)`` delivers every
group message, as after ``/setprivacy`` → Disable; ``tg.withheld`` lists the messages held back.

Webhook mode: once a client calls ``setWebhook``, every pushed update is POSTed (JSON, with the
``X-Telegram-Bot-Api-Secret-Token`` header when a secret was set) to the registered URL, one at a time
in order, and repeated after a pause until the answer is 2xx (``tg.webhook_deliveries`` records each
attempt); ``getUpdates`` answers 409 meanwhile, as Telegram does. ``local_mode=True`` accepts
``http://`` URLs on any port, as a self-hosted Bot API server started with ``--local`` does.

Request bodies are form-urlencoded or multipart; non-string values are JSON-encoded (as PTB sends them).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from tests.fakes.server import ThreadedServer
from tests.fakes.telegram_privacy import PrivacyMode

TEXT_LIMIT = 4096
CAPTION_LIMIT = 1024
GET_FILE_LIMIT = 20 * 1024 * 1024
#: Parameters whose values are plain strings even when they look like JSON.
STRING_PARAMS = {
    "text",
    "caption",
    "parse_mode",
    "file_id",
    "action",
    "url",
    "filename",
    "description",
    "query",
}
HTML_TAGS = {
    "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre",
    "tg-spoiler", "span", "blockquote", "tg-emoji",
}  # fmt: skip
DEFAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    409: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
    429: "Too Many Requests: retry after {retry_after}",
    500: "Internal Server Error",
}
TERMINATED_BY_OTHER = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
)
#: setMyCommands limits (Bot API: BotCommand).
MAX_COMMANDS = 100
COMMAND_NAME = re.compile(r"^[a-z0-9_]{1,32}$")
COMMAND_DESCRIPTION_LIMIT = 256
#: sendChatAction's documented actions.
CHAT_ACTIONS = {
    "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
    "upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note",
}  # fmt: skip
#: setWebhook: secret_token is 1-256 characters of A-Z, a-z, 0-9, _ and -.
WEBHOOK_SECRET = re.compile(r"^[A-Za-z0-9_-]*$")
WEBHOOK_SECRET_LIMIT = 256
#: Ports api.telegram.org sends webhooks to (a local-mode Bot API server allows any).
WEBHOOK_PORTS = {443, 80, 88, 8443}
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
WEBHOOK_ACTIVE = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"
#: Bots FAQ: "your bot will not be able to send more than 20 messages per minute to the same group";
#: the fake answers the 21st message in any trailing 60 s with 429 and ``parameters.retry_after``.
GROUP_MESSAGES_PER_MINUTE = 20
#: Methods that send a new message (what the group limit counts).
SENDING_METHODS = ("sendMessage", "sendDocument", "sendPhoto")
#: getUpdates accepts limit 1-100.
MAX_UPDATES_PER_CALL = 100
#: InlineKeyboardButton: callback_data is 1-64 bytes; a button needs exactly one of these fields.
CALLBACK_DATA_LIMIT = 64
BUTTON_ACTIONS = (
    "url", "callback_data", "web_app", "login_url", "switch_inline_query",
    "switch_inline_query_current_chat", "switch_inline_query_chosen_chat", "copy_text", "callback_game",
    "pay",
)  # fmt: skip
#: InlineKeyboardButton.style (Bot API 9.4).
BUTTON_STYLES = {"primary", "success", "danger"}
BUTTON_DATA_INVALID = "Bad Request: BUTTON_DATA_INVALID"
BAD_MARKUP = "Bad Request: can't parse reply keyboard markup JSON object"
TEXT_BUTTON = (
    "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
)
QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"
#: Update kinds Telegram leaves out when allowed_updates is empty or was never given.
OPT_IN_UPDATES = {"chat_member", "message_reaction", "message_reaction_count"}
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are exactly "
    "the same as a current content and reply markup of the message"
)


class EntityParseError(ValueError):
    pass


class _TelegramHTML(HTMLParser):
    """Validates Telegram's HTML subset and extracts the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in HTML_TAGS:
            raise EntityParseError(f'Unsupported start tag "{tag}"')
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            raise EntityParseError(f'Unmatched end tag "{tag}"')
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_text(text: str, parse_mode: str | None) -> str:
    """What a user sees for ``text`` sent with ``parse_mode`` (raises EntityParseError like Telegram)."""
    if not parse_mode or parse_mode.upper() != "HTML":
        return text
    if re.search(r"<(?![a-zA-Z/])", text) or re.search(r"&(?![a-zA-Z]+;|#\d+;|#x[0-9a-fA-F]+;)", text):
        raise EntityParseError("unescaped '<' or '&'")
    parser = _TelegramHTML()
    parser.feed(text)
    parser.close()
    if parser.stack:
        raise EntityParseError(f'Can\'t find end tag corresponding to start tag "{parser.stack[-1]}"')
    return "".join(parser.parts)


@dataclass
class FakeMessage:
    """A message as the chat shows it. ``history`` holds every visible version, oldest first."""

    chat_id: int
    message_id: int
    from_bot: bool
    history: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)  # the text exactly as sent (e.g. HTML), per version
    parse_mode: str | None = None
    kind: str = "text"  # text | document | photo
    file_name: str | None = None
    file_id: str | None = None
    reply_to: int | None = None
    thread_id: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    #: The inline keyboard shown now (rows of button objects as sent); None = no buttons.
    keyboard: list[list[dict[str, Any]]] | None = None

    @property
    def text(self) -> str:
        return self.history[-1] if self.history else ""

    @property
    def buttons(self) -> list[str]:
        """The labels of the buttons the message shows now, row by row."""
        return [str(b["text"]) for row in self.keyboard or [] for b in row]

    @property
    def edits(self) -> int:
        return max(0, len(self.history) - 1)


@dataclass
class Failure:
    status: int
    description: str
    retry_after: int | None = None


@dataclass
class StoredFile:
    file_id: str
    data: bytes
    name: str
    mime: str | None
    path: str


class FakeTelegram(ThreadedServer):
    def __init__(
        self,
        token: str = "123456:TEST-token-not-real",
        *,
        bot_username: str = "switchboard_bot",
        bot_id: int = 7000001,
        long_poll_cap: float = 1.0,
        local_mode: bool = False,
        webhook_retry_seconds: float = 1.0,
        webhook_max_attempts: int = 20,
        privacy_mode: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        #: Privacy mode (on by default, as BotFather sets it): which group messages reach the bot.
        #: ``privacy_mode=False`` (or ``tg.privacy.enabled = False``) is an operator's ``/setprivacy`` →
        #: Disable; ``tg.privacy.admin_in.add(chat_id)`` makes the bot an admin of that group.
        self.privacy = PrivacyMode(bot_id, bot_username, enabled=privacy_mode)
        #: Group messages people sent that Telegram did not hand to the bot (privacy mode).
        self.withheld: list[dict[str, Any]] = []
        self.local_mode = local_mode
        self.webhook_retry_seconds = webhook_retry_seconds
        self.webhook_max_attempts = webhook_max_attempts
        #: The registered webhook ("" = none), its secret and update kinds, as setWebhook left them.
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        self.webhook_allowed_updates: list[str] | None = None
        #: Every webhook POST attempt: {"update_id", "status"} (status 0 = no HTTP answer).
        self.webhook_deliveries: list[dict[str, Any]] = []
        self._webhook_error: tuple[int, str] | None = None
        self._webhook_wake: asyncio.Event | None = None
        self._webhook_task: asyncio.Task[None] | None = None
        self.token = token
        self.bot_username = bot_username
        self.bot_id = bot_id
        self.long_poll_cap = long_poll_cap
        self.conflict_on_getupdates = False
        self.updates: list[dict[str, Any]] = []
        self.messages: dict[tuple[int, int], FakeMessage] = {}
        self.files: dict[str, StoredFile] = {}
        self.chat_types: dict[int, str] = {}
        self._failures: dict[str, list[Failure]] = {}
        self._late: dict[str, list[tuple[float, Callable[[dict[str, Any]], bool] | None]]] = {}
        self._share: tuple[frozenset[str], float, Failure, Callable[[dict[str, Any]], bool] | None] | None = (
            None
        )
        self._share_rng = random.Random(0)
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._file_ids = itertools.count(1)
        self._state = threading.RLock()
        self._new_update: asyncio.Event | None = None
        self._poll_generation = 0
        #: Update ids confirmed by an offset beyond them (forgotten by the fake, like Telegram does).
        self.confirmed: list[int] = []
        #: Updates handed out by getUpdates, counting redeliveries.
        self.delivered = 0
        #: The last command menu set with setMyCommands, as (command, description).
        self.my_commands: list[tuple[str, str]] = []
        #: Every text each draft showed, oldest first, by (chat_id, draft_id).
        self.drafts: dict[tuple[int, int], list[str]] = {}
        #: The update kinds the bot last asked for (getUpdates / setWebhook); None = never said.
        self.allowed_updates: list[str] | None = None
        #: Updates Telegram did not create because allowed_updates left their kind out.
        self.dropped_updates: list[dict[str, Any]] = []
        #: Every callback query a press created, by id: {"query", "answered", "answers"}.
        self.callback_queries: dict[str, dict[str, Any]] = {}
        self._query_ids = itertools.count(1)
        #: Messages a group may receive per trailing 60 s (None: no limit, for a test that wants none).
        self.group_limit: int | None = GROUP_MESSAGES_PER_MINUTE
        self._group_sends: dict[int, list[float]] = {}

    # --- HTTP ----------------------------------------------------------------------------------------
    def setup_routes(self, app: web.Application) -> None:
        self._new_update = asyncio.Event()
        self._webhook_wake = asyncio.Event()
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)

    async def _params(self, request: web.Request) -> tuple[dict[str, Any], dict[str, tuple[str, bytes, str]]]:
        raw: dict[str, str] = dict(request.query)
        uploads: dict[str, tuple[str, bytes, str]] = {}
        if request.method == "POST":
            if request.content_type == "application/json":
                body = await request.json()
                return dict(body or {}), uploads
            if request.content_type.startswith("multipart/"):
                reader = await request.multipart()
                async for part in reader:
                    if part.filename is not None:
                        data = await part.read(decode=False)
                        ctype = part.headers.get("Content-Type", "application/octet-stream")
                        uploads[part.name or "file"] = (part.filename, bytes(data), ctype)
                    else:
                        raw[part.name or ""] = await part.text()
            else:
                raw.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
        params: dict[str, Any] = {}
        for key, value in raw.items():
            if key in STRING_PARAMS:
                params[key] = value
                continue
            try:
                params[key] = json.loads(value)
            except (ValueError, TypeError):
                params[key] = value
        return params, uploads

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params, uploads = await self._params(request)
        entry: dict[str, Any] = {
            "method": method,
            "params": params,
            "files": sorted(uploads),
            "at": time.time(),
            # Which address the client dialled: tells apart two instances that reach the fake through
            # different addresses (one through a proxy), as their polls cannot be told apart otherwise.
            "host": request.host,
        }
        if request.match_info["token"] != self.token:
            return self._finish(entry, self._error_response(401, "Unauthorized"))
        failure = self._take_failure(method) or self._random_failure(method, params)
        if failure is not None:
            return self._finish(
                entry, self._error_response(failure.status, failure.description, failure.retry_after)
            )
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return self._finish(entry, self._error_response(404, "Not Found"))
        try:
            if method in SENDING_METHODS:
                self._count_group_send(params)
            result = await handler(params, uploads) if method == "getUpdates" else handler(params, uploads)
        except _ApiError as exc:
            return self._finish(entry, self._error_response(exc.status, exc.description, exc.retry_after))
        late = self._take_late(method, params)
        if late:
            await asyncio.sleep(late)
        return self._finish(entry, web.json_response({"ok": True, "result": result}))

    def _finish(self, entry: dict[str, Any], response: web.Response) -> web.Response:
        entry["status"] = response.status
        self.record(entry)
        return response

    @staticmethod
    def _error_response(status: int, description: str, retry_after: int | None = None) -> web.Response:
        body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if retry_after is not None:
            body["parameters"] = {"retry_after": retry_after}
        return web.json_response(body, status=status)

    async def _file(self, request: web.Request) -> web.Response:
        self.record({"method": "downloadFile", "params": {"path": request.match_info["path"]}, "status": 200})
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        with self._state:
            stored = next((f for f in self.files.values() if f.path == request.match_info["path"]), None)
        if stored is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=stored.data, content_type="application/octet-stream")

    # --- Bot API methods (``_m_<method>``) --------------------------------------------------------------
    def _bot_user(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Switchboard", "username": self.bot_username}

    def _known_chat(self, params: dict[str, Any]) -> int:
        """The ``chat_id`` of a chat the bot can reach: one a person opened with it (or a group it is in,
        where someone wrote); anything else is 400 "chat not found", as on Telegram."""
        try:
            chat_id = int(params.get("chat_id") or 0)
        except (TypeError, ValueError):
            chat_id = 0
        with self._state:
            if chat_id == 0 or chat_id not in self.chat_types:
                raise _ApiError(400, "Bad Request: chat not found")
        return chat_id

    def _count_group_send(self, params: dict[str, Any]) -> None:
        """The Bots FAQ's 20 messages per minute per group: past it, 429 with ``retry_after``."""
        chat_id = self._known_chat(params)
        if self.group_limit is None or self._chat(chat_id)["type"] == "private":
            return
        now = time.monotonic()
        with self._state:
            sent = [t for t in self._group_sends.get(chat_id, []) if t > now - 60]
            if len(sent) >= self.group_limit:
                retry_after = max(1, int(sent[0] + 60 - now + 0.999))
                self._group_sends[chat_id] = sent
                raise _ApiError(429, f"Too Many Requests: retry after {retry_after}", retry_after)
            self._group_sends[chat_id] = [*sent, now]

    def _m_getMe(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        return {**self._bot_user(), "can_join_groups": True,
                "can_read_all_group_messages": not self.privacy.enabled,
                "supports_inline_queries": False}  # fmt: skip

    def _m_setWebhook(self, params: dict[str, Any], uploads: Any) -> bool:
        """Bot API: ``url`` is required ("" removes the webhook); api.telegram.org wants HTTPS on port 443,
        80, 88 or 8443; ``secret_token`` is 1-256 characters of A-Z, a-z, 0-9, _ and -; ``allowed_updates``
        left out keeps the previous setting; ``drop_pending_updates`` forgets what is queued."""
        if "url" not in params:
            raise _ApiError(400, 'Bad Request: parameter "url" is required')
        url = str(params.get("url") or "")
        if not url:
            return self._m_deleteWebhook(params, uploads)
        parts = urlsplit(url)
        if not self.local_mode:
            if parts.scheme != "https":
                raise _ApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
            if (parts.port or 443) not in WEBHOOK_PORTS:
                raise _ApiError(
                    400, "Bad Request: bad webhook: Webhook can be set up only on ports 80, 88, 443 or 8443"
                )
        elif parts.scheme not in ("http", "https") or not parts.hostname:
            raise _ApiError(400, "Bad Request: bad webhook: Wrong HTTP URL specified")
        secret = params.get("secret_token")
        if secret is not None:
            secret = str(secret)
            if len(secret) > WEBHOOK_SECRET_LIMIT:
                raise _ApiError(400, "Bad Request: secret token is too long")
            if not WEBHOOK_SECRET.match(secret):
                raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        allowed = params.get("allowed_updates")
        with self._state:
            self.webhook_url = url
            self.webhook_secret = secret or None
            if allowed is not None:
                self.webhook_allowed_updates = list(allowed)
                self.allowed_updates = list(allowed)
            if params.get("drop_pending_updates") is True:
                self.updates = []
            self._webhook_error = None
        if self._webhook_task is None or self._webhook_task.done():
            self._webhook_task = asyncio.get_running_loop().create_task(self._deliver_webhooks())
        assert self._webhook_wake is not None
        self._webhook_wake.set()
        return True

    def _m_deleteWebhook(self, params: dict[str, Any], uploads: Any) -> bool:
        """Bot API: removes the webhook (getUpdates works again); ``drop_pending_updates`` forgets the queue."""
        with self._state:
            self.webhook_url = ""
            self.webhook_secret = None
            if params.get("drop_pending_updates") is True:
                self.updates = []
        return True

    def _m_setMyCommands(self, params: dict[str, Any], uploads: Any) -> bool:
        """Bot API: ``commands`` is required, at most 100; each ``command`` 1-32 characters of lowercase
        letters, digits and underscores, each ``description`` 1-256 characters."""
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise _ApiError(400, 'Bad Request: parameter "commands" is required')
        if len(commands) > MAX_COMMANDS:
            raise _ApiError(400, "Bad Request: too many commands specified")
        for item in commands:
            name = str(item.get("command", "")) if isinstance(item, dict) else ""
            description = str(item.get("description", "")) if isinstance(item, dict) else ""
            if not COMMAND_NAME.match(name):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(description) <= COMMAND_DESCRIPTION_LIMIT:
                raise _ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        with self._state:
            self.my_commands = [(str(c["command"]), str(c["description"])) for c in commands]
        return True

    def _m_sendChatAction(self, params: dict[str, Any], uploads: Any) -> bool:
        """Bot API: ``chat_id`` and ``action`` (one of the documented kinds) are required."""
        self._known_chat(params)
        if params.get("action") not in CHAT_ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    def _m_sendMessageDraft(self, params: dict[str, Any], uploads: Any) -> bool:
        """Bot API 9.3: a partial message streamed to a *private* chat; ``draft_id`` must be non-zero and
        ``text`` is 0-4096 characters after entity parsing (empty shows "Thinking…"). The draft is an
        ephemeral preview: it persists nothing, so the chat's messages do not change."""
        chat_id = self._known_chat(params)
        if self._chat(chat_id)["type"] != "private":
            raise _ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        try:
            draft_id = int(params.get("draft_id") or 0)
        except (TypeError, ValueError):
            draft_id = 0
        if draft_id == 0:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        shown = self._render(params.get("text") or "", params.get("parse_mode"), TEXT_LIMIT, allow_empty=True)
        with self._state:
            self.drafts.setdefault((chat_id, draft_id), []).append(shown)
        return True

    def _m_getWebhookInfo(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        """Bot API WebhookInfo: ``url`` ("" when none), ``pending_update_count``, the last delivery error."""
        with self._state:
            info: dict[str, Any] = {"url": self.webhook_url, "has_custom_certificate": False,
                                    "pending_update_count": len(self.updates)}  # fmt: skip
            if self.webhook_url:
                info["max_connections"] = 40
                if self.webhook_allowed_updates is not None:
                    info["allowed_updates"] = self.webhook_allowed_updates
                if self._webhook_error is not None:
                    info["last_error_date"], info["last_error_message"] = self._webhook_error
            return info

    # --- webhook delivery (the fake's own loop, like Telegram's servers) ---------------------------------
    async def _deliver_webhooks(self) -> None:
        """POST pending updates in order; an update leaves the queue only on a 2xx answer."""
        assert self._webhook_wake is not None
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            attempts = 0
            while True:
                with self._state:
                    url, secret = self.webhook_url, self.webhook_secret
                    update = self.updates[0] if url and self.updates else None
                if update is None:
                    self._webhook_wake.clear()
                    await self._webhook_wake.wait()
                    continue
                headers = {SECRET_HEADER: secret} if secret else {}
                try:
                    async with session.post(url, json=update, headers=headers) as response:
                        status = response.status
                        await response.read()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    status, error = 0, f"Connection failed: {type(exc).__name__}"
                else:
                    error = f"Wrong response from the webhook: {status}"
                attempts += 1
                with self._state:
                    self.webhook_deliveries.append({"update_id": update["update_id"], "status": status})
                    if 200 <= status < 300 or attempts >= self.webhook_max_attempts:
                        if self.updates and self.updates[0] is update:
                            self.updates.pop(0)
                            self.confirmed.append(update["update_id"])
                        attempts = 0
                        continue
                    self._webhook_error = (int(time.time()), error)
                await asyncio.sleep(self.webhook_retry_seconds)

    def repeat_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue the very same update (same ``update_id``) again: what Telegram does when our 200 was lost."""
        with self._state:
            self.updates.append(dict(update))
        self._wake_clients()
        return update

    def webhook_statuses(self, update_id: int) -> list[int]:
        """The HTTP status of every webhook attempt for ``update_id``, oldest first."""
        with self._state:
            return [d["status"] for d in self.webhook_deliveries if d["update_id"] == update_id]

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running() and self._webhook_task is not None:
            task = self._webhook_task
            self._loop.call_soon_threadsafe(task.cancel)
        super().stop()

    async def _m_getUpdates(self, params: dict[str, Any], uploads: Any) -> list[dict[str, Any]]:
        """The Bot API's rules: ``offset`` confirms (and forgets) every update below it, a negative
        offset keeps only the last ``-offset``; at most ``limit`` (1-100) updates with
        ``update_id >= offset`` are returned; ``timeout`` long-polls; a newer getUpdates terminates an
        older one still waiting (that one gets 409 Conflict)."""
        if self.conflict_on_getupdates:
            raise _ApiError(409, DEFAULT_DESCRIPTIONS[409])
        if self.webhook_url:
            raise _ApiError(409, WEBHOOK_ACTIVE)
        offset = int(params.get("offset") or 0)
        limit = min(max(int(params.get("limit") or 100), 1), MAX_UPDATES_PER_CALL)
        timeout = min(max(float(params.get("timeout") or 0), 0.0), self.long_poll_cap)
        assert self._new_update is not None
        allowed = params.get("allowed_updates")
        with self._state:
            if isinstance(allowed, list):
                self.allowed_updates = [str(a) for a in allowed]
            self._poll_generation += 1
            generation = self._poll_generation
            self._confirm(offset)
        self._new_update.set()  # an older long poll wakes up and learns it was terminated
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            self._new_update.clear()
            with self._state:
                if generation != self._poll_generation:
                    raise _ApiError(409, TERMINATED_BY_OTHER)
                ready = [u for u in self.updates if u["update_id"] >= offset][:limit]
            remaining = deadline - asyncio.get_running_loop().time()
            if ready or remaining <= 0:
                with self._state:
                    self.delivered += len(ready)
                return ready
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_update.wait(), remaining)
            if self.conflict_on_getupdates:
                raise _ApiError(409, DEFAULT_DESCRIPTIONS[409])

    def _confirm(self, offset: int) -> None:
        """Forget confirmed updates for good (caller holds ``_state``)."""
        if offset > 0:
            gone = [u["update_id"] for u in self.updates if u["update_id"] < offset]
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
        elif offset < 0:
            keep = self.updates[offset:]
            gone = [u["update_id"] for u in self.updates[: len(self.updates) - len(keep)]]
            self.updates = keep
        else:
            return
        self.confirmed.extend(gone)

    def pending_updates(self) -> list[int]:
        """Update ids Telegram still holds (delivered or not, but not confirmed)."""
        with self._state:
            return [u["update_id"] for u in self.updates]

    def _chat(self, chat_id: int) -> dict[str, Any]:
        chat_type = self.chat_types.get(chat_id, "private" if chat_id > 0 else "supergroup")
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = "User"
        else:
            chat["title"] = f"Group {chat_id}"
        return chat

    def _bot_message(self, chat_id: int, params: dict[str, Any], message: FakeMessage) -> dict[str, Any]:
        self.privacy.bot_sent(chat_id, self.bot_id)
        payload: dict[str, Any] = {
            "message_id": message.message_id,
            "date": int(time.time()),
            "chat": self._chat(chat_id),
            "from": self._bot_user(),
        }
        if message.thread_id is not None:
            payload["message_thread_id"] = message.thread_id
            payload["is_topic_message"] = True
        if message.reply_to is not None and (chat_id, message.reply_to) in self.messages:
            payload["reply_to_message"] = self.messages[(chat_id, message.reply_to)].payload
        return payload

    def _placement(self, params: dict[str, Any]) -> tuple[int | None, int | None]:
        """Where a new message goes. Replying to a message the chat does not have is 400 "message to be
        replied not found" unless ``reply_parameters.allow_sending_without_reply`` is true (then it is
        sent without the reply, as Telegram does)."""
        reply = params.get("reply_parameters") or {}
        reply_to = reply.get("message_id") if isinstance(reply, dict) else None
        reply_to = reply_to or params.get("reply_to_message_id")
        thread = params.get("message_thread_id")
        if reply_to:
            allowed = bool(reply.get("allow_sending_without_reply")) if isinstance(reply, dict) else False
            allowed = allowed or bool(params.get("allow_sending_without_reply"))
            with self._state:
                exists = (int(params.get("chat_id") or 0), int(reply_to)) in self.messages
            if not exists and not allowed:
                raise _ApiError(400, "Bad Request: message to be replied not found")
            if not exists:
                reply_to = None
        return (int(reply_to) if reply_to else None), (int(thread) if thread else None)

    def _render(self, text: Any, parse_mode: str | None, limit: int, *, allow_empty: bool = False) -> str:
        if text is None or text == "":
            if allow_empty:
                return ""
            raise _ApiError(400, "Bad Request: message text is empty")
        try:
            shown = visible_text(str(text), parse_mode)
        except EntityParseError as exc:
            raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if not shown.strip() and not allow_empty:
            raise _ApiError(400, "Bad Request: message text is empty")
        if len(shown) > limit:
            what = "message caption" if limit == CAPTION_LIMIT else "message"
            raise _ApiError(400, f"Bad Request: {what} is too long")
        return shown

    def _m_sendMessage(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        chat_id = self._known_chat(params)
        parse_mode = params.get("parse_mode")
        shown = self._render(params.get("text"), parse_mode, TEXT_LIMIT)
        keyboard = _inline_keyboard(params.get("reply_markup"), inline_only=False)
        reply_to, thread = self._placement(params)
        with self._state:
            message = FakeMessage(chat_id, next(self._message_ids), True, [shown], [str(params["text"])],
                                  parse_mode, reply_to=reply_to, thread_id=thread,
                                  keyboard=keyboard)  # fmt: skip
            message.payload = self._bot_message(chat_id, params, message) | {"text": shown}
            if keyboard is not None:
                message.payload["reply_markup"] = {"inline_keyboard": keyboard}
            self.messages[(chat_id, message.message_id)] = message
            return message.payload

    def _m_editMessageText(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        """Only the bot's own text messages can be edited: an unknown id is "message to edit not found",
        a person's message "message can't be edited"."""
        chat_id = self._known_chat(params)
        key = (chat_id, int(params.get("message_id") or 0))
        parse_mode = params.get("parse_mode")
        shown = self._render(params.get("text"), parse_mode, TEXT_LIMIT)
        # Only an inline keyboard can be edited in; leaving reply_markup out removes the keyboard.
        keyboard = _inline_keyboard(params.get("reply_markup"), inline_only=True)
        with self._state:
            message = self.messages.get(key)
            if message is None:
                raise _ApiError(400, "Bad Request: message to edit not found")
            if not message.from_bot:
                raise _ApiError(400, "Bad Request: message can't be edited")
            if message.kind != "text":
                raise _ApiError(400, "Bad Request: there is no text in the message to edit")
            same_text = message.text == shown and message.raw[-1] == str(params["text"])
            if same_text and message.keyboard == keyboard:
                raise _ApiError(400, NOT_MODIFIED)
            message.history.append(shown)
            message.raw.append(str(params["text"]))
            message.parse_mode = parse_mode
            message.keyboard = keyboard
            payload = {**message.payload, "text": shown, "edit_date": int(time.time())}
            payload.pop("reply_markup", None)
            if keyboard is not None:
                payload["reply_markup"] = {"inline_keyboard": keyboard}
            message.payload = payload
            return message.payload

    def _m_answerCallbackQuery(self, params: dict[str, Any], uploads: Any) -> bool:
        """Bot API: ``callback_query_id`` is required; a query is answered once (a second answer, or an
        id Telegram never issued, is "query is too old … or query ID is invalid")."""
        query_id = str(params.get("callback_query_id") or "")
        if not query_id:
            raise _ApiError(400, 'Bad Request: parameter "callback_query_id" is required')
        with self._state:
            entry = self.callback_queries.get(query_id)
            if entry is None or entry["answered"]:
                raise _ApiError(400, QUERY_INVALID)
            entry["answered"] = True
            entry["answers"].append(dict(params))
        return True

    def _send_media(
        self, kind: str, params: dict[str, Any], uploads: dict[str, tuple[str, bytes, str]]
    ) -> dict[str, Any]:
        chat_id = self._known_chat(params)
        reference = params.get(kind)
        if kind in uploads:
            filename, data, mime = uploads[kind]
            stored = self.add_file(data, filename, mime)
        elif isinstance(reference, str) and reference.startswith("attach://") and reference[9:] in uploads:
            filename, data, mime = uploads[reference[9:]]
            stored = self.add_file(data, filename, mime)
        elif isinstance(reference, str) and reference in self.files:
            stored = self.files[reference]
        else:
            raise _ApiError(400, f"Bad Request: there is no {kind} in the request")
        caption = self._render(
            params.get("caption"), params.get("parse_mode"), CAPTION_LIMIT, allow_empty=True
        )
        reply_to, thread = self._placement(params)
        with self._state:
            message = FakeMessage(chat_id, next(self._message_ids), True, [caption], [str(params.get("caption") or "")],
                                  params.get("parse_mode"), kind=kind, file_name=stored.name,
                                  file_id=stored.file_id, reply_to=reply_to, thread_id=thread)  # fmt: skip
            payload = self._bot_message(chat_id, params, message)
            if kind == "voice":
                payload["voice"] = {"file_id": stored.file_id, "file_unique_id": f"u{stored.file_id}",
                                    "duration": 1, "mime_type": "audio/ogg", "file_size": len(stored.data)}  # fmt: skip
            elif kind == "photo":
                payload["photo"] = [{"file_id": stored.file_id, "file_unique_id": f"u{stored.file_id}",
                                     "width": 640, "height": 480, "file_size": len(stored.data)}]  # fmt: skip
            else:
                payload["document"] = {"file_id": stored.file_id, "file_unique_id": f"u{stored.file_id}",
                                       "file_name": stored.name, "mime_type": stored.mime,
                                       "file_size": len(stored.data)}  # fmt: skip
            if caption:
                payload["caption"] = caption
            message.payload = payload
            self.messages[(chat_id, message.message_id)] = message
            return payload

    def _m_sendDocument(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        return self._send_media("document", params, uploads)

    def _m_sendPhoto(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        return self._send_media("photo", params, uploads)

    def _m_sendVoice(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        """A voice note; the Bot API wants OGG/Opus (or MP3/M4A) for it to play as one."""
        upload = uploads.get("voice")
        if (
            upload is not None
            and not upload[1].startswith((b"OggS", b"ID3", b"\xff\xfb"))
            and b"ftyp" not in upload[1][:12]
        ):
            raise _ApiError(400, "Bad Request: wrong file type: voice must be OGG/Opus, MP3 or M4A")
        return self._send_media("voice", params, uploads)

    def _m_getFile(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        stored = self.files.get(str(params.get("file_id")))
        if stored is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        if len(stored.data) > GET_FILE_LIMIT:
            raise _ApiError(400, "Bad Request: file is too big")
        return {"file_id": stored.file_id, "file_unique_id": f"u{stored.file_id}",
                "file_size": len(stored.data), "file_path": stored.path}  # fmt: skip

    # --- injection API (thread-safe; call from tests) ----------------------------------------------------
    def push_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue a raw update (``update_id`` is assigned when missing) and wake long-polling clients.

        An update of a kind the bot's ``allowed_updates`` leaves out is not created at all (kept in
        :attr:`dropped_updates`), as on Telegram.
        """
        with self._state:
            update = dict(update)
            update.setdefault("update_id", next(self._update_ids))
            kind = next((k for k in update if k != "update_id"), "")
            allowed = self.allowed_updates
            if (kind not in allowed) if allowed else (kind in OPT_IN_UPDATES):
                self.dropped_updates.append(update)
                return update
            self.updates.append(update)
        self._wake_clients()
        return update

    def press(
        self,
        chat_id: int,
        message_id: int,
        label: str,
        *,
        user_id: int = 1001,
        username: str | None = "alice",
        first_name: str = "Alice",
        inaccessible: bool = False,
    ) -> dict[str, Any]:
        """A user taps the inline button ``label`` on message ``message_id``: pushes (and returns) the
        ``callback_query`` update. Refuses a button the message does not show now (nobody can tap what
        is gone). Each call is a new query with its own id. ``inaccessible``: the query carries only an
        InaccessibleMessage (chat, message_id, ``date: 0``), as Telegram sends for a message the bot
        can no longer read."""
        with self._state:
            message = self.messages.get((chat_id, message_id))
            if message is None:
                raise KeyError(f"no message {message_id} in chat {chat_id}")
            button = next((b for row in message.keyboard or [] for b in row if b["text"] == label), None)
            if button is None or "callback_data" not in button:
                raise LookupError(
                    f"message {message_id} shows no button {label!r} (it shows {message.buttons})"
                )
            query_id = str(4_000_000_000_000_000_000 + next(self._query_ids))
            user = {"id": user_id, "is_bot": False, "first_name": first_name}
            if username:
                user["username"] = username
            shown = dict(message.payload)
            if inaccessible:
                shown = {"chat": shown["chat"], "message_id": message_id, "date": 0}
            query = {"id": query_id, "from": user, "message": shown,
                     "chat_instance": f"{abs(chat_id) * 7919}", "data": button["callback_data"]}  # fmt: skip
            self.callback_queries[query_id] = {"query": query, "answered": False, "answers": []}
        return self.push_update({"callback_query": query})

    def redeliver_press(self, update: dict[str, Any]) -> dict[str, Any]:
        """The same callback query again, in a new update (what a restart with a lost offset yields)."""
        return self.push_update({"callback_query": update["callback_query"]})

    def unanswered(self) -> list[str]:
        """Ids of callback queries nobody answered yet (each one is a spinner on somebody's button)."""
        with self._state:
            return [q for q, entry in self.callback_queries.items() if not entry["answered"]]

    def _wake_clients(self) -> None:
        """A new update: long-polling clients and the webhook sender look again."""
        if self._loop is not None:
            for event in (self._new_update, self._webhook_wake):
                if event is not None:
                    self._loop.call_soon_threadsafe(event.set)

    def add_file(
        self, data: bytes, name: str, mime: str | None = None, *, folder: str | None = None
    ) -> StoredFile:
        """Store bytes as a Telegram file (what a user upload becomes); returns it with its file_id.

        ``folder`` is where Telegram's ``file_path`` puts it (``voice/file_3.oga`` for a voice note)."""
        with self._state:
            number = next(self._file_ids)
            file_id = f"FILE{number:04d}"
            folder = folder or ("photos" if (mime or "").startswith("image/") else "documents")
            stored = StoredFile(file_id, data, name, mime, f"{folder}/file_{number}_{name}")
            self.files[file_id] = stored
            return stored

    def open_chat(self, chat_id: int, chat_type: str | None = None) -> None:
        """A chat the bot can write to without a message in it yet: a person pressed Start (private)
        or the bot was added to a group. Any other chat is "chat not found", as on Telegram."""
        with self._state:
            self.chat_types[chat_id] = chat_type or ("private" if chat_id > 0 else "supergroup")

    def user_message(
        self,
        chat_id: int,
        text: str | None = None,
        *,
        user_id: int = 1001,
        username: str | None = "alice",
        first_name: str = "Alice",
        chat_type: str | None = None,
        message_id: int | None = None,
        reply_to: int | None = None,
        thread_id: int | None = None,
        document: tuple[str, bytes, str] | None = None,
        photo: bytes | None = None,
        caption: str | None = None,
        voice: tuple[bytes, int] | None = None,
        audio: tuple[str, bytes, str, int] | None = None,
        is_bot: bool = False,
        push: bool = True,
    ) -> dict[str, Any]:
        """Build (and by default push) a ``message`` update as a user would send it; returns the message.

        In a group with privacy mode on, a message not meant for the bot (no ``/command`` for it, no
        ``@mention``, no reply to it) is not delivered, as on Telegram: it goes to :attr:`withheld`.
        Entities for ``@mentions`` and a leading ``/command`` are computed like Telegram's clients do.
        ``reply_to`` is a message id already in this fake (the bot's or a user's). ``thread_id`` makes
        it a forum-topic message. ``voice`` is a voice note (OGG/Opus bytes, duration in seconds), sent
        as the Bot API's ``Voice`` object; ``audio`` a music file (name, bytes, mime, seconds), ``Audio``.
        """
        if chat_type is None:
            chat_type = self.chat_types.get(chat_id, "private" if chat_id > 0 else "supergroup")
        with self._state:
            self.chat_types[chat_id] = chat_type
            mid = message_id if message_id is not None else next(self._message_ids)
        user = {"id": user_id, "is_bot": is_bot, "first_name": first_name}
        if username:
            user["username"] = username
        message: dict[str, Any] = {"message_id": mid, "date": int(time.time()), "chat": self._chat(chat_id),
                                   "from": user}  # fmt: skip
        if text is not None:
            message["text"] = text
            if entities := _entities(text):
                message["entities"] = entities
        if caption is not None:
            message["caption"] = caption
            if entities := _entities(caption):
                message["caption_entities"] = entities
        if document is not None:
            name, data, mime = document
            stored = self.add_file(data, name, mime)
            message["document"] = {"file_id": stored.file_id, "file_unique_id": f"u{stored.file_id}",
                                   "file_name": name, "mime_type": mime, "file_size": len(data)}  # fmt: skip
        if photo is not None:
            stored = self.add_file(photo, f"photo_{mid}.jpg", "image/jpeg")
            message["photo"] = [{"file_id": stored.file_id, "file_unique_id": f"u{stored.file_id}",
                                 "width": 800, "height": 600, "file_size": len(photo)}]  # fmt: skip
        if voice is not None:  # Bot API ``Voice``: no file_name; downloadable through getFile
            data, seconds = voice
            stored = self.add_file(data, f"voice_{mid}.oga", "audio/ogg", folder="voice")
            message["voice"] = {"file_id": stored.file_id, "file_unique_id": f"u{stored.file_id}",
                                "duration": seconds, "mime_type": "audio/ogg", "file_size": len(data)}  # fmt: skip
        if audio is not None:  # Bot API ``Audio``
            name, data, mime, seconds = audio
            stored = self.add_file(data, name, mime, folder="music")
            message["audio"] = {"file_id": stored.file_id, "file_unique_id": f"u{stored.file_id}",
                                "duration": seconds, "file_name": name, "mime_type": mime,
                                "file_size": len(data)}  # fmt: skip
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        with self._state:
            if reply_to is not None:
                original = self.messages.get((chat_id, reply_to))
                if original is None:
                    raise KeyError(f"no message {reply_to} in chat {chat_id} to reply to")
                message["reply_to_message"] = original.payload
            stored_message = FakeMessage(chat_id, mid, False, [text or caption or ""], [text or caption or ""],
                                         reply_to=reply_to, thread_id=thread_id, payload=message)  # fmt: skip
            self.messages[(chat_id, mid)] = stored_message
            if is_bot:
                self.privacy.bot_sent(chat_id, user_id)
            delivered = self.privacy.delivers(message)
            if not delivered:
                self.withheld.append(message)
        if push and delivered:
            self.push_update({"message": message})
        return message

    def redeliver(self, message: dict[str, Any]) -> dict[str, Any]:
        """Deliver the same message again in a new update (what a restart with a lost offset looks like)."""
        return self.push_update({"message": message})

    def fail_next(
        self,
        method: str,
        status: int = 429,
        *,
        retry_after: int | None = None,
        description: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail with ``status`` (429 carries ``retry_after``)."""
        if status == 429 and retry_after is None:
            retry_after = 1
        text = description or DEFAULT_DESCRIPTIONS.get(status, "Error").format(retry_after=retry_after)
        with self._state:
            self._failures.setdefault(method, []).extend([Failure(status, text, retry_after)] * times)

    def fail_share(
        self,
        methods: Sequence[str],
        share: float,
        *,
        status: int = 429,
        retry_after: int | None = 1,
        when: Callable[[dict[str, Any]], bool] | None = None,
        seed: int = 0,
    ) -> None:
        """From now on, fail about ``share`` of the calls of ``methods`` (those whose parameters
        ``when`` accepts) with ``status``, as a busy Bot API does; ``share=0`` stops it. Seeded: a run
        fails the same calls each time."""
        text = DEFAULT_DESCRIPTIONS.get(status, "Error").format(retry_after=retry_after)
        with self._state:
            self._share = (frozenset(methods), share, Failure(status, text, retry_after), when)
            self._share_rng = random.Random(seed)

    def answer_late(
        self, method: str, seconds: float, *, when: Callable[[dict[str, Any]], bool] | None = None
    ) -> None:
        """Carry out the next call of ``method`` (one whose parameters ``when`` accepts) at once but answer
        it ``seconds`` late, as a slow network does: the chat already shows the message while the bot
        still waits for its id."""
        with self._state:
            self._late.setdefault(method, []).append((seconds, when))

    def _take_late(self, method: str, params: dict[str, Any]) -> float:
        with self._state:
            waiting = self._late.get(method, [])
            for index, (seconds, when) in enumerate(waiting):
                if when is None or when(params):
                    del waiting[index]
                    return seconds
            return 0.0

    def _random_failure(self, method: str, params: dict[str, Any]) -> Failure | None:
        with self._state:
            if self._share is None:
                return None
            methods, share, failure, when = self._share
            if method not in methods or (when is not None and not when(params)):
                return None
            return failure if self._share_rng.random() < share else None

    def _take_failure(self, method: str) -> Failure | None:
        with self._state:
            queue = self._failures.get(method)
            return queue.pop(0) if queue else None

    # --- views ------------------------------------------------------------------------------------------
    def calls(self, method: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self.requests if method is None or r["method"] == method]

    def call_count(self, method: str) -> int:
        """How many times ``method`` was called (successful or not)."""
        with self._lock:
            return sum(1 for r in self.requests if r["method"] == method)

    def chat_messages(self, chat_id: int) -> list[FakeMessage]:
        """Every message in the chat (users' and the bot's), by message id."""
        with self._state:
            return sorted(
                (m for (c, _), m in self.messages.items() if c == chat_id), key=lambda m: m.message_id
            )

    def bot_messages(self, chat_id: int) -> list[FakeMessage]:
        return [m for m in self.chat_messages(chat_id) if m.from_bot]

    def bot_texts(self, chat_id: int) -> list[str]:
        return [m.text for m in self.bot_messages(chat_id)]

    async def wait_until(self, predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
        """Poll ``predicate`` from the caller's event loop until it returns something truthy."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if loop.time() > deadline:
                raise AssertionError(f"condition not met within {timeout}s")
            await asyncio.sleep(0.02)

    async def wait_for_bot_text(self, chat_id: int, needle: str, timeout: float = 15.0) -> FakeMessage:
        """The first bot message in ``chat_id`` whose current text contains ``needle``."""
        return await self.wait_until(
            lambda: next((m for m in self.bot_messages(chat_id) if needle in m.text), None), timeout
        )


class _ApiError(Exception):
    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status, self.description, self.retry_after = status, description, retry_after


def _inline_keyboard(markup: Any, *, inline_only: bool) -> list[list[dict[str, Any]]] | None:
    """Validate ``reply_markup`` like the Bot API; returns the inline keyboard rows (None: no buttons).

    ``sendMessage`` also takes reply keyboards, ``ReplyKeyboardRemove`` and ``ForceReply`` (no inline
    buttons result); ``editMessageText`` takes an inline keyboard only.
    """
    if markup is None or markup == "":
        return None
    if not isinstance(markup, dict):
        raise _ApiError(400, BAD_MARKUP)
    if "inline_keyboard" not in markup:
        if inline_only or not ({"keyboard", "remove_keyboard", "force_reply"} & set(markup)):
            raise _ApiError(400, BAD_MARKUP)
        return None
    rows = markup["inline_keyboard"]
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise _ApiError(400, BAD_MARKUP)
    for row in rows:
        for button in row:
            if not isinstance(button, dict) or not isinstance(button.get("text"), str):
                raise _ApiError(
                    400,
                    'Bad Request: can\'t parse inline keyboard button: Field "text" must be of type String',
                )
            actions = [key for key in BUTTON_ACTIONS if key in button]
            if not actions:
                raise _ApiError(400, TEXT_BUTTON)
            if len(actions) > 1:
                raise _ApiError(
                    400,
                    "Bad Request: can't parse inline keyboard button: exactly one action field is allowed",
                )
            if "callback_data" in button:
                data = button["callback_data"]
                if not isinstance(data, str) or not 1 <= len(data.encode("utf-8")) <= CALLBACK_DATA_LIMIT:
                    raise _ApiError(400, BUTTON_DATA_INVALID)
            if "style" in button and button["style"] not in BUTTON_STYLES:
                raise _ApiError(400, "Bad Request: can't parse inline keyboard button: wrong button style")
    kept = [list(row) for row in rows if row]
    return kept or None


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _entities(text: str) -> list[dict[str, Any]]:
    """Mention and leading bot-command entities, with offsets in UTF-16 code units like Telegram's."""
    found: list[dict[str, Any]] = []
    command = re.match(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?", text)
    if command:
        found.append({"type": "bot_command", "offset": 0, "length": _utf16_len(command.group(0))})
    for match in re.finditer(r"(?<![\w/])@[A-Za-z][A-Za-z0-9_]{3,31}", text):
        found.append(
            {
                "type": "mention",
                "offset": _utf16_len(text[: match.start()]),
                "length": _utf16_len(match.group(0)),
            }
        )
    return found


__all__ = ["FakeMessage", "FakeTelegram", "visible_text"]


def main() -> None:
    """Run the fake by hand: ``python -m tests.fakes.telegram [--port P]``; Ctrl-C stops it."""
    import argparse

    parser = argparse.ArgumentParser(description="fake Telegram Bot API server on 127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bot-username", default="switchboard_bot")
    args = parser.parse_args()
    fake = FakeTelegram(bot_username=args.bot_username, port=args.port, long_poll_cap=25.0)
    fake.start()
    print(f"fake Telegram at {fake.url}")
    print(f"  channels.telegram: {{enabled: true, api_base_url: {fake.url}, bot_token: '{fake.token}'}}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
