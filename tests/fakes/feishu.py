"""A fake Feishu/Lark open platform: the HTTP API and the websocket long connection, on 127.0.0.1.

Point the real lark-oapi SDK at it with ``domain=fake.url``. It speaks what the SDK speaks:

* ``POST /open-apis/auth/v3/{tenant,app}_access_token/internal`` — tokens with a configurable ``expire``
  (the SDK refreshes 10 minutes early, so ``token_expire=601`` gives a token the SDK keeps for ~1 s);
  tokens are checked on every API call and rejected (99991663) once expired here too.
* ``GET /open-apis/bot/v3/info`` — the bot's ``open_id``.
* ``POST /callback/ws/endpoint`` → ``ws://…/ws?device_id=…&service_id=…`` plus a ``ClientConfig``;
  the socket exchanges protobuf ``Frame``s (``lark_oapi.ws.pb.pbbp2_pb2``): events go out as DATA frames
  (headers ``type=event``, ``message_id``, ``sum``/``seq`` for fragments), pings are answered with pongs,
  and the client's response frames (its acks, ``{"code": 200}`` or 500) are recorded in ``acks``.
* Re-push, as Feishu does: an event not answered with code 200 within ``ack_deadline`` (Feishu: 3 s,
  "processed within 3 seconds without an exception") is pushed again with the same ``event_id`` after
  ``retry_delays`` (Feishu's schedule for failed pushes: 5 s, 5 min, 1 h, 6 h — four retries), to one
  open connection (cluster mode), waiting for a connection if the app is away; events it stopped
  retrying are listed in ``given_up``. ``push_event(..., redeliver=False)`` pushes once.
* IM: messages create / reply / patch (cards must declare ``update_multi``; bodies over 30 KB refused),
  reactions, message resources (download), file and image upload.
* CardKit, from the open-platform pages "创建卡片实体", "流式更新文本" and "更新卡片配置" (their request
  fields, validation ranges and error tables): ``POST /open-apis/cardkit/v1/cards`` (``type`` must be
  ``card_json``, ``data`` a JSON 2.0 card: 300303 otherwise, 300302 for ``update_multi: false``, 300301
  for a duplicate ``element_id``, 300305 over 200 elements, 200860 over 30 KB, 200220 unparsable);
  ``PUT …/cards/:card_id/elements/:element_id/content`` (``content`` 1–100,000 characters and ``sequence``
  1–2147483647 required, else 10002; 300317 unless ``sequence`` is larger than the card's last; 300309
  when streaming mode is off; 200850 once streaming has been on for ``streaming_timeout`` — Feishu's
  10 minutes — which also switches it off; 300310 for an element that is not ``markdown``/``plain_text``;
  200740 for an unknown card); ``PATCH …/cards/:card_id/settings`` (``settings`` JSON string and
  ``sequence`` required; same sequence rule). A card entity is sent as ``interactive`` content
  ``{"type": "card", "data": {"card_id": …}}``, once (the docs say "仅支持发送一次"; the code for a
  second send is not on those pages, so the fake answers 230099 like other unusable card content).
  While the message shows a card entity, each accepted content update is one more version in its
  ``history``; ``streaming`` tells whether the chat list still shows it as being generated.

* Card buttons (JSON 2.0 ``button``, from the pages "按钮" and "卡片回传交互"): a card whose button is
  malformed (no ``plain_text`` label of 1–100 characters, a ``type`` outside Feishu's list, no
  ``behaviors`` or one whose type is unknown, a 1.0 ``action`` module in a 2.0 card) is refused like
  other unusable card content (IM send/PATCH: 230099; CardKit create: 200220). ``press(message, label,
  operator)`` is a user clicking a button the message shows *now* (a button that is gone cannot be
  pressed): a ``card.action.trigger`` callback goes out over the long connection as an ``event`` frame
  (the frame type lark-oapi routes to ``register_p2_card_action_trigger``); the answer must come
  within 3 s, code 200 with a JSON object (``toast``/``card``) as its ``data``, else Feishu shows the
  user an error (recorded in ``press_errors``) and the fake pushes it again like an unanswered event.
  ``DELETE …/cards/:card_id/elements/:element_id`` takes a component out of a card entity (same
  sequence rule; 300313 for an unknown element).

* Rates Feishu meters per object (pages "更新已发送的消息卡片" and "流式更新卡片"): a message takes at most
  5 PATCHes a second ("单条消息更新频控为 5 QPS"; the sixth is refused with 230020, the IM frequency-limit
  code), a card entity at most 10 card/element calls a second ("单个卡片实体…频率上限为 10 次/秒"; those
  pages name no code, so the fake answers like the gateway's frequency control: HTTP 429, 99991400,
  ``x-ogw-ratelimit-reset``).
* ``element_id`` (page "卡片 JSON 2.0 结构"): unique in the card, letters/digits/underscores, starting with
  a letter, at most 20 characters — checked in every component of the body, nested ones too, for
  CardKit create (300301 for a duplicate, 10002 otherwise) and for JSON 2.0 cards sent or PATCHed as
  message content (230099); path ``element_id`` 1–20 characters (10002).
* 200810 ("the card is in an ongoing interaction"): from a press on a streaming card entity until its
  callback is answered (or the 3 s deadline passes), every CardKit call on that card is refused.
* Required fields the IM pages list are enforced with the gateway's field-validation code 99992402
  (``receive_id`` of a new message, ``reaction_type.emoji_type`` of a reaction).
* Contact (page "获取单个用户信息"): ``GET /open-apis/contact/v3/users/:user_id`` answers the users added
  with ``add_user``; 99991672 without a contact scope (``contact_scope=False``), 41050 for a user outside
  the app's contact range, 41012 for an unknown id; ``name`` only with ``contact:user.base:readonly``
  (``name_scope``).

Every request is recorded in ``requests`` (refused ones with their ``code``; see ``refusals``);
``fail_next(path_substring, status=…, code=…)`` injects failures; ``chat(chat_id)`` shows what the bot
posted there, each message with its edit history.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from tests.fakes.server import ThreadedServer

MAX_CARD_BODY = 30 * 1024
#: CardKit: element text length, sequence range, components per card, streaming-mode lifetime.
MAX_ELEMENT_CONTENT = 100_000
MAX_SEQUENCE = 2_147_483_647
MAX_CARD_ELEMENTS = 200
#: JSON 2.0 button: label length and the ``type`` values Feishu lists.
MAX_BUTTON_LABEL = 100
BUTTON_TYPES = frozenset(
    {"default", "primary", "danger", "text", "primary_text", "danger_text", "primary_filled"}
    | {"danger_filled", "laser"}
)
BEHAVIOR_TYPES = frozenset({"callback", "open_url"})
STREAMING_TIMEOUT = 600.0
#: Per-object rates: PATCHes of one message, card/element calls on one card entity, per second.
MESSAGE_PATCH_QPS = 5
CARD_QPS = 10
#: JSON 2.0 ``element_id``: a letter, then letters, digits or underscores; 20 characters at most.
ELEMENT_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,19}")
#: Feishu counts an event as failed unless the client answers it (code 200) within 3 seconds.
ACK_DEADLINE = 3.0
#: Pause before each re-push of a failed event (Feishu documents 5 s, 5 min, 1 h and 6 h).
RETRY_DELAYS = (5.0, 300.0, 3600.0, 21600.0)
FRAME_CONTROL, FRAME_DATA = 0, 1


@dataclass(slots=True)
class LarkMessage:
    """A message the bot posted, as a Feishu user would see it (``history`` = every version shown)."""

    message_id: str
    chat_id: str
    msg_type: str
    contents: list[str] = field(default_factory=list)  # raw ``content`` JSON per version
    reply_to: str | None = None
    reply_in_thread: bool = False
    card: FakeCard | None = None  # the CardKit card entity this message shows, if any
    card_id: str | None = None  # the entity it was sent as (kept after a PATCH replaced it)

    @property
    def streaming(self) -> bool:
        """A card entity still in streaming mode: the chat list shows its "generating" summary."""
        return self.card is not None and self.card.streaming

    @property
    def mentions(self) -> list[str]:
        """Who the shown card @mentions: ``<at id=…>`` tags left in its markdown (Feishu pings them)."""
        if not self.contents or self.msg_type != "interactive":
            return []
        # Code blocks and inline code show their text as typed; only the rest is parsed for tags.
        markdown = re.sub(r"```.*?```|`[^`\n]*`", "", markdown_of(self.contents[-1]), flags=re.DOTALL)
        return [m.group(1) for m in AT_TAG.finditer(markdown)]

    @property
    def history(self) -> list[str]:
        return [render(self.msg_type, c) for c in self.contents]

    @property
    def text(self) -> str:
        return self.history[-1] if self.contents else ""

    @property
    def patches(self) -> int:
        return len(self.contents) - 1

    @property
    def buttons(self) -> list[str]:
        """The labels of the buttons the message shows now."""
        if not self.contents or self.msg_type != "interactive":
            return []
        return [str(b["text"]["content"]) for b in buttons_of(self.contents[-1])]


AT_TAG = re.compile(r"<at\s+(?:id|user_id|email)=['\"]?([^'\" >]+)", re.IGNORECASE)


@dataclass(slots=True)
class FakeCard:
    """A CardKit card entity: its card JSON (kept current) and its streaming state."""

    card_id: str
    data: dict[str, Any]
    streaming: bool
    opened_at: float
    sequence: int = 0
    message_id: str | None = None
    #: The press (event id) being answered; until then (or ``busy_until``) the card refuses updates.
    busy_with: str | None = None
    busy_until: float = 0.0

    @property
    def busy(self) -> bool:
        return self.busy_with is not None and time.time() < self.busy_until

    def elements(self) -> list[dict[str, Any]]:
        return [e for e in (self.data.get("body") or {}).get("elements") or [] if isinstance(e, dict)]

    def snapshot(self) -> str:
        return json.dumps(self.data, ensure_ascii=False)


def markdown_of(content: str) -> str:
    try:
        value = json.loads(content)
    except ValueError:
        return ""
    elements = value.get("elements") or (value.get("body") or {}).get("elements") or []
    return "\n".join(str(e.get("content", "")) for e in elements if e.get("tag") == "markdown")


def render(msg_type: str, content: str) -> str:
    """What a user reads in a message: the card's markdown, the text, or a file/image placeholder."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    if msg_type == "interactive":
        elements = value.get("elements") or value.get("body", {}).get("elements") or []
        parts = []
        for element in elements:
            if element.get("tag") == "markdown":
                # Card markdown shows an escaped "<" as the character itself.
                parts.append(str(element.get("content", "")).replace("&lt;", "<").replace("&#60;", "<"))
            elif element.get("tag") == "div":
                parts.append(str((element.get("text") or {}).get("content", "")))
        return "\n".join(parts)
    if msg_type == "text":
        return str(value.get("text", ""))
    if msg_type == "file":
        return f"[file {value.get('file_key')}]"
    if msg_type == "image":
        return f"[image {value.get('image_key')}]"
    return content


def _callback_answer(response: dict[str, Any]) -> dict[str, Any] | None:
    """The callback answer in a long-connection response frame: base64 JSON in ``data``, or None."""
    data = response.get("data")
    if not isinstance(data, str) or not data:
        return None
    try:
        value = json.loads(base64.b64decode(data))
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) - {"toast", "card"}:
        return None
    return value


def button_problem(elements: list[Any]) -> str | None:
    """Why Feishu would refuse these JSON 2.0 card elements' buttons, or None."""
    for element in elements:
        if not isinstance(element, dict):
            return "a card element must be an object"
        if element.get("tag") == "action":
            return "the action module (tag action) is not supported in card JSON 2.0"
        if element.get("tag") != "button":
            continue
        text = element.get("text")
        if not isinstance(text, dict) or text.get("tag") not in ("plain_text", "lark_md"):
            return "button text must be a plain_text or lark_md object"
        content = text.get("content")
        if not isinstance(content, str) or not 1 <= len(content) <= MAX_BUTTON_LABEL:
            return f"button text content must be 1 to {MAX_BUTTON_LABEL} characters"
        if element.get("type", "default") not in BUTTON_TYPES:
            return f"unknown button type {element.get('type')!r}"
        behaviors = element.get("behaviors")
        if not isinstance(behaviors, list) or not behaviors:
            return "a button outside a form needs behaviors"
        for behavior in behaviors:
            if not isinstance(behavior, dict) or behavior.get("type") not in BEHAVIOR_TYPES:
                return "unknown behavior type"
            if behavior["type"] == "callback" and not isinstance(behavior.get("value"), (dict, str)):
                return "a callback behavior needs a value"
    return None


def element_id_problem(body: Any) -> str | None:
    """Why Feishu would refuse the ``element_id``s in a JSON 2.0 card body (nested components too)."""
    seen: set[str] = set()

    def walk(node: Any) -> str | None:
        if isinstance(node, list):
            return next((p for p in map(walk, node) if p is not None), None)
        if not isinstance(node, dict):
            return None
        if "element_id" in node:
            element_id = node["element_id"]
            if not isinstance(element_id, str) or not ELEMENT_ID.fullmatch(element_id):
                return f"invalid element_id {element_id!r}: a letter, then letters/digits/_; at most 20"
            if element_id in seen:
                return f"Duplicate element_id in card component: {element_id!r}"
            seen.add(element_id)
        return next((p for p in map(walk, node.values()) if p is not None), None)

    return walk(body)


def buttons_of(content: str) -> list[dict[str, Any]]:
    """The buttons a card (message content or card JSON) shows, in order."""
    try:
        value = json.loads(content)
    except ValueError:
        return []
    elements = value.get("elements") or (value.get("body") or {}).get("elements") or []
    return [e for e in elements if isinstance(e, dict) and e.get("tag") == "button"]


@dataclass(slots=True)
class _Failure:
    path: str
    method: str | None
    status: int
    code: int
    retry_after: float
    times: int


def _error(code: int, msg: str, status: int = 400) -> web.Response:
    return web.json_response({"code": code, "msg": msg}, status=status)


class FakeLark(ThreadedServer):
    def __init__(
        self,
        *,
        app_id: str | None = None,
        app_secret: str = "fake-app-secret",
        bot_open_id: str = "ou_bot0000000000000000000000000001",
        bot_name: str = "Switchboard",
        tenant_key: str = "tenant-fake-1",
        token_expire: int = 7200,
        ack_deadline: float = ACK_DEADLINE,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
        streaming_timeout: float = STREAMING_TIMEOUT,
    ) -> None:
        super().__init__()
        self.streaming_timeout = streaming_timeout
        self.cards: dict[str, FakeCard] = {}
        self.ack_deadline = ack_deadline
        self.retry_delays = retry_delays
        self.given_up: list[str] = []  # event ids never answered with 200, retries exhausted
        self.pushes: dict[str, int] = {}  # event id → how many times it was pushed
        # A fresh app_id per fake: lark-oapi caches tenant tokens process-wide, keyed by app_id.
        self.app_id = app_id or f"cli_{uuid.uuid4().hex[:16]}"
        self.app_secret = app_secret
        self.bot_open_id = bot_open_id
        self.bot_name = bot_name
        self.tenant_key = tenant_key
        self.token_expire = token_expire
        self.tokens: dict[str, float] = {}  # token → expires at (server clock)
        self.token_requests = 0
        self.messages: dict[str, LarkMessage] = {}
        self.reactions: list[tuple[str, str]] = []
        self.resources: dict[tuple[str, str], tuple[str, bytes]] = {}
        self.uploads: dict[str, tuple[str, bytes]] = {}  # key → (file name, bytes)
        self.acks: list[dict[str, Any]] = []
        #: card.action.trigger event ids → the press the fake delivered (see :meth:`press`).
        self.presses: dict[str, dict[str, Any]] = {}
        #: Event ids of presses whose answer Feishu would not accept (late, 500, or no JSON object).
        self.press_errors: set[str] = set()
        self.user_messages: dict[str, str] = {}  # message_id → chat_id of messages users "wrote"
        self.pings = 0
        self.ws_connections = 0
        self.endpoint_calls = 0
        self._sockets: list[tuple[web.WebSocketResponse, int]] = []
        self._failures: list[_Failure] = []
        self._holds: dict[str, asyncio.Event] = {}
        self.held = 0  # requests currently parked by hold()
        self._ids = itertools.count(1)
        self._seq = itertools.count(1)
        #: Arrival times of recent calls per rate-limited object ("patch:<message_id>", "card:<card_id>").
        self._rates: dict[str, list[float]] = {}
        #: Contact: open_id → display name; who the app may look up (None = everyone); granted scopes.
        self.users: dict[str, str] = {}
        self.contact_range: set[str] | None = None
        self.contact_scope = True
        self.name_scope = True

    # --- routes ------------------------------------------------------------------------------------
    def setup_routes(self, app: web.Application) -> None:
        app.middlewares.append(self._middleware)
        r = app.router
        r.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._tenant_token)
        r.add_post("/open-apis/auth/v3/app_access_token/internal", self._app_token)
        r.add_get("/open-apis/bot/v3/info", self._bot_info)
        r.add_post("/callback/ws/endpoint", self._ws_endpoint)
        r.add_get("/ws", self._ws)
        r.add_post("/open-apis/im/v1/messages", self._create_message)
        r.add_post("/open-apis/im/v1/messages/{message_id}/reply", self._reply_message)
        r.add_patch("/open-apis/im/v1/messages/{message_id}", self._patch_message)
        r.add_post("/open-apis/im/v1/messages/{message_id}/reactions", self._reaction)
        r.add_get("/open-apis/im/v1/messages/{message_id}/resources/{file_key}", self._resource)
        r.add_post("/open-apis/im/v1/files", self._upload_file)
        r.add_post("/open-apis/im/v1/images", self._upload_image)
        r.add_post("/open-apis/cardkit/v1/cards", self._create_card)
        r.add_put("/open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content", self._card_content)
        r.add_patch("/open-apis/cardkit/v1/cards/{card_id}/settings", self._card_settings)
        r.add_delete("/open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}", self._delete_element)
        r.add_get("/open-apis/contact/v3/users/{user_id}", self._get_user)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/ws":
            return await handler(request)
        body: Any = None
        if request.content_type == "application/json" and request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
        entry: dict[str, Any] = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "json": body,
            "authorization": request.headers.get("Authorization"),
            "at": time.time(),
        }
        self.record(entry)
        for key, gate in list(self._holds.items()):
            if key in request.path:
                self.held += 1
                try:
                    await gate.wait()
                finally:
                    self.held -= 1
        failure = self._take_failure(request)
        if failure is not None:
            entry["injected"] = failure.status
            headers = {}
            if failure.status == 429 or failure.code == 99991400:
                headers["x-ogw-ratelimit-reset"] = f"{failure.retry_after:g}"
                headers["x-ogw-ratelimit-limit"] = "5"
            return web.json_response(
                {"code": failure.code, "msg": "injected failure"}, status=failure.status, headers=headers
            )
        if request.path.startswith("/open-apis/") and "/auth/" not in request.path:
            problem = self._check_token(request)
            if problem is not None:
                return problem
        response = await handler(request)
        if isinstance(response, web.Response) and response.content_type == "application/json":
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                entry["code"] = json.loads(response.body or b"{}").get("code")  # type: ignore[arg-type]
        return response

    def _over_rate(self, key: str, limit: int) -> bool:
        """Count one call on ``key``; True when it is over ``limit`` calls in the last second."""
        now = time.time()
        with self._lock:
            recent = [t for t in self._rates.get(key, []) if t > now - 1.0]
            over = len(recent) >= limit
            if not over:
                recent.append(now)
            self._rates[key] = recent
        return over

    def _card_gate(self, card: FakeCard) -> web.Response | None:
        """Per-card rate, then the interaction lock: what every CardKit call on ``card`` passes first."""
        if self._over_rate(f"card:{card.card_id}", CARD_QPS):
            headers = {"x-ogw-ratelimit-limit": str(CARD_QPS), "x-ogw-ratelimit-reset": "1"}
            return web.json_response(
                {"code": 99991400, "msg": "request trigger frequency limit"}, status=429, headers=headers
            )
        if card.busy:
            return _error(200810, "The card is in an ongoing interaction and cannot be updated")
        return None

    def _take_failure(self, request: web.Request) -> _Failure | None:
        with self._lock:
            for failure in self._failures:
                if failure.path in request.path and failure.method in (None, request.method):
                    failure.times -= 1
                    if failure.times <= 0:
                        self._failures.remove(failure)
                    return failure
        return None

    def refusals(self, code: int | None = None) -> list[dict[str, Any]]:
        """Requests the fake refused (any non-zero ``code``, or just ``code``), injected ones excluded."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.get("code") not in (None, 0) and (code is None or r["code"] == code)
            ]

    def _check_token(self, request: web.Request) -> web.Response | None:
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip()
        expires = self.tokens.get(token)
        if expires is None or expires < time.time():
            return web.json_response(
                {"code": 99991663, "msg": "Invalid access token for authorization."}, status=400
            )
        return None

    # --- auth & bot --------------------------------------------------------------------------------
    def _issue(self) -> str:
        token = f"t-{uuid.uuid4().hex}"
        self.tokens[token] = time.time() + self.token_expire
        self.token_requests += 1
        return token

    async def _tenant_token(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return web.json_response({"code": 10014, "msg": "app secret invalid"})
        return web.json_response(
            {"code": 0, "msg": "ok", "tenant_access_token": self._issue(), "expire": self.token_expire}
        )

    async def _app_token(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return web.json_response({"code": 10014, "msg": "app secret invalid"})
        token = self._issue()
        return web.json_response(
            {
                "code": 0,
                "msg": "ok",
                "app_access_token": token,
                "tenant_access_token": token,
                "expire": self.token_expire,
            }
        )

    async def _bot_info(self, request: web.Request) -> web.Response:
        bot = {
            "activate_status": 2,
            "app_name": self.bot_name,
            "avatar_url": "",
            "ip_white_list": [],
            "open_id": self.bot_open_id,
        }
        return web.json_response({"code": 0, "msg": "ok", "bot": bot})

    # --- websocket ---------------------------------------------------------------------------------
    async def _ws_endpoint(self, request: web.Request) -> web.Response:
        self.endpoint_calls += 1
        body = await request.json()
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return web.json_response({"code": 403, "msg": "app credentials are invalid"})
        service_id = 7000 + self.endpoint_calls
        url = f"ws://{self.host}:{self.port}/ws?device_id=dev-{self.endpoint_calls}&service_id={service_id}"
        config = {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": 120}
        return web.json_response({"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": config}})

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        service_id = int(request.query.get("service_id", "0"))
        entry = (ws, service_id)
        self._sockets.append(entry)
        self.ws_connections += 1
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY:
                    continue
                frame = Frame()
                frame.ParseFromString(msg.data)
                headers = {h.key: h.value for h in frame.headers}
                if frame.method == FRAME_CONTROL and headers.get("type") == "ping":
                    self.pings += 1
                    await ws.send_bytes(self._frame(FRAME_CONTROL, service_id, {"type": "pong"}, b""))
                elif frame.method == FRAME_DATA:
                    try:
                        response = json.loads(frame.payload or b"{}")
                    except ValueError:
                        response = {}
                    frame_id = headers.get("message_id")
                    code = response.get("code")
                    if frame_id in self.presses and code == 200 and _callback_answer(response) is None:
                        code = None  # Feishu cannot read it: to the user it is an error like no answer
                    with self._lock:
                        self.acks.append(
                            {
                                "message_id": frame_id,
                                "code": code,
                                "headers": headers,
                                "data": _callback_answer(response),
                            }
                        )
                        if frame_id in self.presses and code != 200:
                            self.press_errors.add(str(frame_id))
                        for card in self.cards.values():
                            if card.busy_with == frame_id:
                                card.busy_with = None  # the interaction ended with the answer
        finally:
            if entry in self._sockets:
                self._sockets.remove(entry)
        return ws

    def _frame(self, method: int, service_id: int, headers: dict[str, str], payload: bytes) -> bytes:
        frame = Frame()
        seq = next(self._seq)
        frame.SeqID = seq
        frame.LogID = seq
        frame.service = service_id
        frame.method = method
        for key, value in headers.items():
            header = frame.headers.add()
            header.key, header.value = key, value
        frame.payload = payload
        return frame.SerializeToString()

    @property
    def connected(self) -> bool:
        return bool(self._sockets)

    def push_event(
        self, event: dict[str, Any], *, fragments: int = 1, redeliver: bool = True, frame_type: str = "event"
    ) -> None:
        """Send one event over the open long connections, optionally split into ``fragments`` frames.

        Unless ``redeliver=False``, it is pushed again (to one connection) until it is answered with 200.
        """
        payload = json.dumps(event, ensure_ascii=False).encode()
        frame_id = str(event["header"]["event_id"])
        size = -(-len(payload) // fragments)
        parts = [payload[i * size : (i + 1) * size] for i in range(fragments)]

        async def send() -> None:
            if not self._sockets:
                raise RuntimeError("no long connection is open")
            acks_before = self._ack_count(frame_id)
            for ws, service_id in list(self._sockets):
                await self._send_parts(ws, service_id, frame_id, parts, frame_type)
            if redeliver:
                self.redeliver(self._repush_until_answered(frame_id, parts, acks_before, frame_type))

        self.call(send)

    async def _send_parts(
        self,
        ws: web.WebSocketResponse,
        service_id: int,
        frame_id: str,
        parts: list[bytes],
        frame_type: str = "event",
    ) -> None:
        with self._lock:
            self.pushes[frame_id] = self.pushes.get(frame_id, 0) + 1
        for seq, part in enumerate(parts):
            headers = {
                "type": frame_type,
                "message_id": frame_id,
                "trace_id": uuid.uuid4().hex,
                "sum": str(len(parts)),
                "seq": str(seq),
            }
            await ws.send_bytes(self._frame(FRAME_DATA, service_id, headers, part))

    def _ack_count(self, frame_id: str) -> int:
        with self._lock:
            return sum(1 for a in self.acks if a["message_id"] == frame_id)

    def _answered_since(self, frame_id: str, index: int) -> bool | None:
        """True once a 200 came after the ``index``-th ack, False on a failure answer, None while silent."""
        with self._lock:
            answers = [a["code"] for a in self.acks if a["message_id"] == frame_id][index:]
        if any(code == 200 for code in answers):
            return True
        return False if answers else None

    async def _repush_until_answered(
        self, frame_id: str, parts: list[bytes], acks_before: int, frame_type: str = "event"
    ) -> None:
        """Runs on the server loop: Feishu's re-push policy for one event."""
        for attempt in range(len(self.retry_delays) + 1):
            if attempt:
                await asyncio.sleep(self.retry_delays[attempt - 1])
                while not self._sockets:  # the app is away (restarting): push when it is back
                    await asyncio.sleep(0.05)
                acks_before = self._ack_count(frame_id)
                ws, service_id = self._sockets[-1]
                try:
                    await self._send_parts(ws, service_id, frame_id, parts, frame_type)
                except (RuntimeError, ConnectionError):
                    continue
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.ack_deadline
            while loop.time() < deadline and self._answered_since(frame_id, acks_before) is None:
                await asyncio.sleep(0.02)
            # An answer after the deadline does not count: Feishu has already marked the push failed.
            if self._answered_since(frame_id, acks_before) and loop.time() <= deadline + 0.05:
                return
            if frame_id in self.presses:
                with self._lock:
                    self.press_errors.add(frame_id)
        with self._lock:
            self.given_up.append(frame_id)

    # --- injection: user messages ------------------------------------------------------------------
    def message_event(
        self,
        chat_id: str,
        chat_type: str,
        sender_open_id: str,
        text: str = "",
        *,
        mentions_bot: bool = False,
        message_id: str | None = None,
        root_id: str | None = None,
        thread_id: str | None = None,
        message_type: str = "text",
        content: dict[str, Any] | None = None,
        sender_type: str = "user",
    ) -> dict[str, Any]:
        """A real-looking schema-2.0 ``im.message.receive_v1`` event (not sent; see ``push_event``)."""
        message_id = message_id or f"om_{uuid.uuid4().hex}"
        self.user_messages[message_id] = chat_id
        now_ms = str(int(time.time() * 1000))
        mentions = []
        if mentions_bot:
            text = f"@_user_1 {text}"
            mentions.append(
                {
                    "key": "@_user_1",
                    "id": {"union_id": "on_bot", "user_id": "", "open_id": self.bot_open_id},
                    "name": self.bot_name,
                    "tenant_key": self.tenant_key,
                }
            )
        body = content if content is not None else {"text": text}
        return {
            "schema": "2.0",
            "header": {
                "event_id": uuid.uuid4().hex,
                "token": "",
                "create_time": now_ms,
                "event_type": "im.message.receive_v1",
                "tenant_key": self.tenant_key,
                "app_id": self.app_id,
            },
            "event": {
                "sender": {
                    "sender_id": {
                        "union_id": f"on_{sender_open_id}",
                        "user_id": sender_open_id.removeprefix("ou_"),
                        "open_id": sender_open_id,
                    },
                    "sender_type": sender_type,
                    "tenant_key": self.tenant_key,
                },
                "message": {
                    "message_id": message_id,
                    "root_id": root_id or "",
                    "parent_id": root_id or "",
                    "create_time": now_ms,
                    "update_time": now_ms,
                    "chat_id": chat_id,
                    "thread_id": thread_id or "",
                    "chat_type": chat_type,
                    "message_type": message_type,
                    "content": json.dumps(body, ensure_ascii=False),
                    "mentions": mentions,
                    "user_agent": "Mozilla/5.0 (fake Feishu)",
                },
            },
        }

    def send_message_event(
        self,
        chat_id: str,
        chat_type: str,
        sender_open_id: str,
        text: str = "",
        mentions_bot: bool = False,
        message_id: str | None = None,
        root_id: str | None = None,
        *,
        fragments: int = 1,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A user writes ``text`` in ``chat_id`` (``p2p`` or ``group``); returns the event sent.

        ``fragments`` > 1 splits the frame payload (``sum``/``seq`` headers), as Feishu does for big events.
        """
        event = self.message_event(
            chat_id,
            chat_type,
            sender_open_id,
            text,
            mentions_bot=mentions_bot,
            message_id=message_id,
            root_id=root_id,
            **kwargs,
        )
        self.push_event(event, fragments=fragments)
        return event

    def send_file_event(
        self,
        chat_id: str,
        chat_type: str,
        sender_open_id: str,
        name: str,
        data: bytes,
        *,
        image: bool = False,
    ) -> dict[str, Any]:
        """A user sends a file (or image); its bytes become downloadable as a message resource."""
        message_id = f"om_{uuid.uuid4().hex}"
        if image:
            key = f"img_v3_{uuid.uuid4().hex[:12]}"
            content: dict[str, Any] = {"image_key": key}
            message_type = "image"
        else:
            key = f"file_v3_{uuid.uuid4().hex[:12]}"
            content = {"file_key": key, "file_name": name}
            message_type = "file"
        self.resources[(message_id, key)] = (name, data)
        event = self.message_event(
            chat_id,
            chat_type,
            sender_open_id,
            message_id=message_id,
            message_type=message_type,
            content=content,
        )
        self.push_event(event)
        return event

    def send_audio_event(
        self, chat_id: str, chat_type: str, sender_open_id: str, data: bytes, *, duration_ms: int
    ) -> dict[str, Any]:
        """A user sends a voice message: ``message_type: audio``, content ``{file_key, duration}`` (the
        duration in milliseconds); its Ogg/Opus bytes are downloadable as a ``type=file`` resource."""
        message_id = f"om_{uuid.uuid4().hex}"
        key = f"file_v3_{uuid.uuid4().hex[:12]}"
        self.resources[(message_id, key)] = (f"{key}.opus", data)
        content = {"file_key": key, "duration": duration_ms}
        event = self.message_event(
            chat_id, chat_type, sender_open_id, message_id=message_id, message_type="audio", content=content
        )
        self.push_event(event)
        return event

    def press(
        self, message: LarkMessage, label: str, operator_open_id: str, *, frame_type: str = "event"
    ) -> dict[str, Any]:
        """A user clicks the button ``label`` on ``message``; returns the ``card.action.trigger`` sent.

        Refuses a button the message does not show now. Each call is a new press with its own
        ``event_id``; ``push_event(press)`` again is Feishu re-pushing the same one. ``frame_type="card"``
        sends it in a ``type=card`` frame, as some deployments report Feishu doing.
        """
        with self._lock:
            shown = message.contents[-1] if message.contents else ""
        button = next((b for b in buttons_of(shown) if b["text"]["content"] == label), None)
        if button is None:
            labels = ", ".join(message.buttons) or "none"
            raise LookupError(f"{message.message_id} shows no button {label!r} (it shows: {labels})")
        behavior = next(b for b in button["behaviors"] if b["type"] == "callback")
        event = {
            "schema": "2.0",
            "header": {
                "event_id": uuid.uuid4().hex,
                "token": "",
                "create_time": str(int(time.time() * 1_000_000)),
                "event_type": "card.action.trigger",
                "tenant_key": self.tenant_key,
                "app_id": self.app_id,
            },
            "event": {
                "operator": {
                    "tenant_key": self.tenant_key,
                    "user_id": operator_open_id.removeprefix("ou_"),
                    "open_id": operator_open_id,
                    "union_id": f"on_{operator_open_id}",
                },
                "token": f"c-{uuid.uuid4().hex}",
                "action": {"value": behavior.get("value"), "tag": "button"},
                "host": "im_message",
                "context": {"open_message_id": message.message_id, "open_chat_id": message.chat_id},
            },
        }
        with self._lock:
            self.presses[event["header"]["event_id"]] = event
            card = message.card
            if card is not None and card.streaming:
                # "在用户点击卡片请求回调交互期间，卡片无法实现流式更新": until the callback is answered.
                card.busy_with = event["header"]["event_id"]
                card.busy_until = time.time() + self.ack_deadline
        self.push_event(event, frame_type=frame_type)
        return event

    def fail_next(
        self,
        path_substring: str,
        *,
        status: int = 429,
        code: int | None = None,
        method: str | None = None,
        times: int = 1,
        retry_after: float = 1,
    ) -> None:
        """The next ``times`` requests whose path contains ``path_substring`` (and method) fail."""
        if code is None:
            code = 99991400 if status == 429 else 230001
        with self._lock:
            self._failures.append(_Failure(path_substring, method, status, code, retry_after, times))

    def hold(self, path_substring: str) -> None:
        """Park every request whose path contains ``path_substring`` until :meth:`release`."""

        def make() -> None:
            self._holds[path_substring] = asyncio.Event()

        self.call(make)

    def release(self) -> None:
        def fire() -> None:
            for gate in self._holds.values():
                gate.set()
            self._holds.clear()

        self.call(fire)

    def clear_failures(self) -> None:
        with self._lock:
            self._failures.clear()

    # --- IM API ----------------------------------------------------------------------------------------
    def _new_message(self, chat_id: str, body: dict[str, Any], reply_to: str | None = None) -> web.Response:
        msg_type, content = str(body.get("msg_type") or ""), str(body.get("content") or "")
        card = self._card_reference(msg_type, content)
        if isinstance(card, web.Response):
            return card
        problem = None if card is not None else self._check_content(msg_type, content)
        if problem is not None:
            return problem
        message_id = f"om_bot{next(self._ids):06d}"
        shown = card.snapshot() if card is not None else content
        message = LarkMessage(
            message_id,
            chat_id,
            msg_type,
            [shown],
            reply_to,
            bool(body.get("reply_in_thread")),
            card,
            card.card_id if card is not None else None,
        )
        with self._lock:
            if card is not None:
                card.message_id = message_id
            self.messages[message_id] = message
        return web.json_response(
            {
                "code": 0,
                "msg": "success",
                "data": {
                    "message_id": message_id,
                    "root_id": reply_to or "",
                    "parent_id": reply_to or "",
                    "msg_type": msg_type,
                    "create_time": str(int(time.time() * 1000)),
                    "update_time": str(int(time.time() * 1000)),
                    "deleted": False,
                    "updated": False,
                    "chat_id": chat_id,
                    "sender": {"id": self.app_id, "id_type": "app_id", "sender_type": "app"},
                    "body": {"content": content},
                },
            }
        )

    def _card_reference(self, msg_type: str, content: str) -> FakeCard | web.Response | None:
        """The card entity an ``interactive`` message names (``{"type": "card", …}``), or None for card JSON."""
        if msg_type != "interactive":
            return None
        try:
            value = json.loads(content)
        except ValueError:
            return None
        if not isinstance(value, dict) or value.get("type") != "card":
            return None
        card_id = str((value.get("data") or {}).get("card_id") or "")
        card = self.cards.get(card_id)
        if card is None:
            return _error(230099, f"Failed to create card content: card entity {card_id!r} not found")
        if card.message_id is not None:
            return _error(230099, "Failed to create card content: a card entity can only be sent once")
        return card

    def _check_content(self, msg_type: str, content: str) -> web.Response | None:
        try:
            value = json.loads(content)
        except ValueError:
            return web.json_response({"code": 230001, "msg": "invalid message content"}, status=400)
        if msg_type == "interactive":
            if len(content.encode()) > MAX_CARD_BODY:
                return web.json_response({"code": 230025, "msg": "card content too long"}, status=400)
            if not (value.get("config") or {}).get("update_multi"):
                return web.json_response(
                    {"code": 230099, "msg": "card must declare update_multi"}, status=400
                )
            problem = button_problem((value.get("body") or {}).get("elements") or [])
            if problem is None and value.get("schema") == "2.0":
                problem = element_id_problem(value.get("body"))
            if problem is not None:
                return _error(230099, f"Failed to create card content: {problem}")
        elif msg_type not in ("text", "post", "file", "image"):
            return web.json_response({"code": 230001, "msg": f"unsupported msg_type {msg_type}"}, status=400)
        return None

    async def _create_message(self, request: web.Request) -> web.Response:
        body = await request.json()
        if request.query.get("receive_id_type") != "chat_id":
            return web.json_response(
                {"code": 230001, "msg": "receive_id_type must be chat_id here"}, status=400
            )
        if not isinstance(body.get("receive_id"), str) or not body["receive_id"]:
            return _error(99992402, "field validation failed: receive_id is required")
        return self._new_message(str(body.get("receive_id")), body)

    async def _reply_message(self, request: web.Request) -> web.Response:
        target = request.match_info["message_id"]
        chat_id = self._chat_of(target)
        if chat_id is None:
            return web.json_response({"code": 230011, "msg": "The message was recalled."}, status=400)
        return self._new_message(chat_id, await request.json(), reply_to=target)

    def _chat_of(self, message_id: str) -> str | None:
        if message_id in self.messages:
            return self.messages[message_id].chat_id
        return self.user_messages.get(message_id)

    async def _patch_message(self, request: web.Request) -> web.Response:
        message = self.messages.get(request.match_info["message_id"])
        if message is None:
            return web.json_response({"code": 230011, "msg": "The message was recalled."}, status=400)
        if message.msg_type != "interactive":
            return web.json_response({"code": 230001, "msg": "only cards can be updated"}, status=400)
        if self._over_rate(f"patch:{message.message_id}", MESSAGE_PATCH_QPS):
            return _error(230020, "This operation triggers the frequency limit.")
        body = await request.json()
        content = str(body.get("content") or "")
        problem = self._check_content("interactive", content)
        if problem is not None:
            return problem
        with self._lock:
            message.contents.append(content)
            message.card = None  # the message now shows this card JSON, no longer the entity
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    # --- CardKit ------------------------------------------------------------------------------------
    def _check_card_json(self, data: Any) -> dict[str, Any] | web.Response:
        if not isinstance(data, str) or not data:
            return _error(300307, "The card DSL is empty")
        if len(data.encode()) > MAX_CARD_BODY:
            return _error(200860, "Card content exceeds limit.")
        try:
            card = json.loads(data)
        except ValueError:
            return _error(200220, "Failed to generate card content")
        if not isinstance(card, dict):
            return _error(200220, "Failed to generate card content")
        if card.get("schema") != "2.0":
            return _error(300303, "Only schema 2.0 is supported")
        if (card.get("config") or {}).get("update_multi") is False:
            return _error(300302, "update_multi property is false")
        elements = (card.get("body") or {}).get("elements") or []
        problem = button_problem(elements)
        if problem is not None:
            return _error(200220, f"Failed to generate card content: {problem}")
        if len(elements) > MAX_CARD_ELEMENTS:
            return _error(300305, "The number of card components exceeds 200")
        problem = element_id_problem(card.get("body"))
        if problem is not None and problem.startswith("Duplicate"):
            return _error(300301, problem)
        if problem is not None:
            return _error(10002, problem)
        return card

    async def _create_card(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("type") != "card_json":
            return _error(10002, "type must be card_json (templates are not served by this fake)")
        card = self._check_card_json(body.get("data"))
        if isinstance(card, web.Response):
            return card
        card_id = f"7{next(self._ids):018d}"
        streaming = bool((card.get("config") or {}).get("streaming_mode"))
        with self._lock:
            self.cards[card_id] = FakeCard(card_id, card, streaming, time.time())
        return web.json_response({"code": 0, "msg": "success", "data": {"card_id": card_id}})

    def _take_sequence(self, card: FakeCard, body: dict[str, Any]) -> web.Response | None:
        sequence = body.get("sequence")
        if not isinstance(sequence, int) or isinstance(sequence, bool) or not 1 <= sequence <= MAX_SEQUENCE:
            return _error(10002, "sequence is required: a positive int32")
        if sequence <= card.sequence:
            return _error(
                300317, "The sequence number for operating on the card did not increment consecutively"
            )
        card.sequence = sequence
        return None

    def _publish(self, card: FakeCard) -> None:
        """The card changed: the message showing it (if sent) shows one more version."""
        message = self.messages.get(card.message_id or "")
        if message is not None and message.card is card:
            message.contents.append(card.snapshot())

    async def _card_content(self, request: web.Request) -> web.Response:
        card = self.cards.get(request.match_info["card_id"])
        if card is None:
            return _error(200740, "The card entity does not exist")
        if not 1 <= len(request.match_info["element_id"]) <= 20:
            return _error(10002, "element_id must be 1 to 20 characters")
        gate = self._card_gate(card)
        if gate is not None:
            return gate
        body = await request.json()
        content = body.get("content")
        if not isinstance(content, str) or not 1 <= len(content) <= MAX_ELEMENT_CONTENT:
            return _error(10002, "content is required: 1 to 100000 characters")
        with self._lock:
            if card.streaming and time.time() - card.opened_at > self.streaming_timeout:
                card.streaming = False
                return _error(200850, "Card streaming timeout")
            if not card.streaming:
                return _error(300309, "Card streaming closed")
            element = next(
                (e for e in card.elements() if e.get("element_id") == request.match_info["element_id"]), None
            )
            if element is None:
                return _error(300313, "Failed to update element properties: no such element_id")
            if element.get("tag") not in ("markdown", "plain_text"):
                return _error(300310, "Only update text")
            problem = self._take_sequence(card, body)
            if problem is not None:
                return problem
            element["content"] = content
            self._publish(card)
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _delete_element(self, request: web.Request) -> web.Response:
        card = self.cards.get(request.match_info["card_id"])
        if card is None:
            return _error(200740, "The card entity does not exist")
        if not 1 <= len(request.match_info["element_id"]) <= 20:
            return _error(10002, "element_id must be 1 to 20 characters")
        gate = self._card_gate(card)
        if gate is not None:
            return gate
        try:
            body = await request.json()
        except ValueError:
            body = {}
        with self._lock:
            elements = (card.data.get("body") or {}).get("elements") or []
            element_id = request.match_info["element_id"]
            found = [e for e in elements if isinstance(e, dict) and e.get("element_id") == element_id]
            if not found:
                return _error(300313, "Failed to update element properties: no such element_id")
            problem = self._take_sequence(card, body or {})
            if problem is not None:
                return problem
            card.data["body"]["elements"] = [e for e in elements if e not in found]
            self._publish(card)
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _card_settings(self, request: web.Request) -> web.Response:
        card = self.cards.get(request.match_info["card_id"])
        if card is None:
            return _error(200740, "The card entity does not exist")
        gate = self._card_gate(card)
        if gate is not None:
            return gate
        body = await request.json()
        raw = body.get("settings")
        try:
            settings = (
                json.loads(raw) if isinstance(raw, str) and 1 <= len(raw) <= MAX_ELEMENT_CONTENT else None
            )
        except ValueError:
            settings = None
        if not isinstance(settings, dict):
            return _error(10002, "settings is required: a JSON string with config and/or card_link")
        config = settings.get("config") or {}
        if config.get("update_multi") is False:
            return _error(300302, "update_multi property is false")
        with self._lock:
            problem = self._take_sequence(card, body)
            if problem is not None:
                return problem
            card.data.setdefault("config", {}).update(config)
            if "streaming_mode" in config:
                if config["streaming_mode"] and not card.streaming:
                    card.opened_at = time.time()
                card.streaming = bool(config["streaming_mode"])
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _reaction(self, request: web.Request) -> web.Response:
        body = await request.json()
        emoji = str((body.get("reaction_type") or {}).get("emoji_type") or "")
        if not emoji:
            return _error(99992402, "field validation failed: reaction_type.emoji_type is required")
        with self._lock:
            self.reactions.append((request.match_info["message_id"], emoji))
        return web.json_response(
            {
                "code": 0,
                "msg": "success",
                "data": {
                    "reaction_id": uuid.uuid4().hex,
                    "operator": {"operator_id": self.app_id, "operator_type": "app"},
                    "action_time": str(int(time.time() * 1000)),
                    "reaction_type": {"emoji_type": emoji},
                },
            }
        )

    async def _get_user(self, request: web.Request) -> web.Response:
        if not self.contact_scope:
            return _error(
                99991672,
                "Access denied. One of the following scopes is required: "
                "[contact:contact.base:readonly, contact:contact:readonly_as_app]",
            )
        if request.query.get("user_id_type", "open_id") != "open_id":
            return _error(40001, "invalid parameter: this fake looks users up by open_id")
        open_id = request.match_info["user_id"]
        if open_id not in self.users:
            return _error(41012, "user id invalid error")
        if self.contact_range is not None and open_id not in self.contact_range:
            return _error(41050, "no user authority")
        user: dict[str, Any] = {"open_id": open_id, "union_id": f"on_{open_id}"}
        if self.name_scope:  # the name field needs contact:user.base:readonly
            user["name"] = self.users[open_id]
        return web.json_response({"code": 0, "msg": "success", "data": {"user": user}})

    def add_user(self, open_id: str, name: str) -> None:
        """A person in the tenant's contacts (what ``contact/v3/users/:id`` answers for them)."""
        with self._lock:
            self.users[open_id] = name

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        key = (request.match_info["message_id"], request.match_info["file_key"])
        found = self.resources.get(key)
        if found is None or request.query.get("type") not in ("image", "file"):
            return web.json_response({"code": 234003, "msg": "File not in msg."}, status=400)
        name, data = found
        return web.Response(
            body=data,
            content_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    async def _read_multipart(self, request: web.Request) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        reader = await request.multipart()
        async for part in reader:
            if part.filename is not None:
                fields[part.name or "file"] = (part.filename, await part.read())
            else:
                fields[part.name or ""] = await part.text()
        return fields

    async def _upload_file(self, request: web.Request) -> web.Response:
        fields = await self._read_multipart(request)
        if "file" not in fields:
            return web.json_response({"code": 234001, "msg": "Invalid request param."}, status=400)
        key = f"file_v3_{uuid.uuid4().hex[:12]}"
        with self._lock:
            self.uploads[key] = (str(fields.get("file_name") or fields["file"][0]), fields["file"][1])
        return web.json_response({"code": 0, "msg": "success", "data": {"file_key": key}})

    async def _upload_image(self, request: web.Request) -> web.Response:
        fields = await self._read_multipart(request)
        if "image" not in fields:
            return web.json_response({"code": 234001, "msg": "Invalid request param."}, status=400)
        key = f"img_v3_{uuid.uuid4().hex[:12]}"
        with self._lock:
            self.uploads[key] = fields["image"]
        return web.json_response({"code": 0, "msg": "success", "data": {"image_key": key}})

    # --- views -----------------------------------------------------------------------------------------
    def chat(self, chat_id: str) -> list[LarkMessage]:
        """What the bot posted in ``chat_id``, oldest first."""
        with self._lock:
            return [m for m in self.messages.values() if m.chat_id == chat_id]

    def calls(self, method: str, path_substring: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["method"] == method and path_substring in r["path"]]

    def acks_for(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        event_id = event["header"]["event_id"]
        with self._lock:
            return [a for a in self.acks if a["message_id"] == event_id]

    async def wait_for(self, predicate: Any, timeout: float = 15.0) -> None:
        """Poll ``predicate(self)`` until true (the fake lives on another thread, so no condition vars)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            if loop.time() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            await asyncio.sleep(0.02)

    async def wait_for_text(self, chat_id: str, needle: str, timeout: float = 15.0) -> LarkMessage:
        await self.wait_for(lambda f: any(needle in m.text for m in f.chat(chat_id)), timeout)
        return next(m for m in self.chat(chat_id) if needle in m.text)
