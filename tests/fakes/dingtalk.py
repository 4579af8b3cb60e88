"""A fake DingTalk: stream gateway (websocket) + the OpenAPI calls a robot makes, on 127.0.0.1.

The real dingtalk-stream SDK connects to it unchanged: ``POST /v1.0/gateway/connections/open`` returns a
``ws://127.0.0.1`` endpoint and a ticket, the websocket speaks the Stream protocol's JSON frames
(``CALLBACK`` frames on topic ``/v1.0/im/bot/messages/get``, ``SYSTEM`` pings) and records the client's
ACK frames. Alongside: OAuth access tokens (with a real expiry, expired tokens get 401), AI cards
(create, deliver, variable updates, streaming updates — see "AI cards" below), session webhooks (``/robot/sendBySession?session=…``), file
downloads by downloadCode, and outbound files (``/media/upload`` on the old oapi host, then
``oToMessages/batchSend`` / ``groupMessages/send``).

Driving it from a test::

    fake.send_bot_message("1", "hello", sender_id="alice")            # one-to-one
    fake.send_bot_message("2", "hi", sender_id="bob", conversation_id="cid-team", at_bot=True)
    fake.fail_next("/v1.0/card/streaming", status=429)
    await fake.wait_for(lambda: fake.markdown_texts(fake.p2p_conversation("alice")))

Redelivery: a robot-message CALLBACK that is not ACKed with status 200 within ``ack_deadline`` is pushed
again (same frame, same ``messageId``) after each of ``retry_delays``, to the newest connection, waiting
for one while the app is away; events it stopped retrying are in ``given_up``. DingTalk's Stream docs
say a callback without a successful ACK is redelivered but give no figure we could check offline, so
both numbers are parameters (defaults: 5 s, then retries after 1 s, 5 s and 30 s) — assumptions, not
DingTalk facts. ``push_callback(..., redeliver=False)`` pushes once. ``ack_log`` keeps every ACK in order.

AI cards, as DingTalk's card API and dingtalk-stream's ``AICardReplier`` describe them: the template has
a streamed markdown variable (``card_content_key``, "content" here) and the AI card's ``flowStatus``
(the SDK's ``AICardStatus``: "1" processing, "2" inputing, "3" finished, "4" executing, "5" failed).
``cardParamMap`` is a string-to-string map (anything else is a 400). ``PUT /v1.0/card/instances``
replaces the whole map unless ``cardUpdateOptions.updateCardDataByKey`` is true. ``PUT
/v1.0/card/streaming`` needs all of outTrackId, guid, key, content, isFull, isFinalize and isError, a
key that is a streamed variable of the template, and a card created with ``callbackType`` STREAM (else
HTTP 500, as integrators report). A delivery without ``userIdType`` answers success but the card never
shows up (also as integrators report). Two assumptions, not documented facts: a card whose stream was
finalised or whose flowStatus is finished/failed refuses further streaming (400); every flowStatus a
card went through is kept in ``Bubble.flow`` so tests can check the sequence.

Buttons, as DingTalk's card examples (open-dingtalk/dingtalk-card-examples) build them: a template
button only calls back when its click event is a callback request (回传请求); a loop-rendered button
list reads an object-array variable (``card_actions_key``, "actions" here; ``None``: a template without
one), sent like every non-string variable as a JSON string — the fake refuses (400) one that is not a
JSON array of ``{"label", "command", ...}`` objects (an assumption: the template's fields). ``Bubble.buttons``
is what the card shows now. ``press_button(card, label, user_id)`` pushes a card callback on
``/v1.0/card/instances/callback`` shaped like DingTalk's (outTrackId, corpId, userId with userIdType 1,
the delivery's spaceType/spaceId, ``content`` = JSON ``{"cardPrivateData": {"actionIds", "params":
{"command"}}}``), redelivered until ACKed like any callback; it refuses a button the card does not show,
a card not created with callbackType STREAM, and an app that did not subscribe to the card topic when it
opened its connection (the gateway pushes only subscribed topics). ``push_again(message_id)`` repeats a
frame unchanged (a gateway that missed the ACK). ``presses`` lists the pushed presses.

Rules taken from DingTalk's documentation (issue 30; docs/testing.md lists each with its test): a card
delivery answers ``result[]`` per space (a group without the robot, ``groups_without_robot``, or a
missing deliver model fails that space and shows nothing; ``fail_delivery`` forces it); ``/media/upload``
checks ``type`` (40004), the extension for that type (40005) and its size (40006) — ``MEDIA_RULES``;
``sampleFile`` needs a ``file`` upload, ``sampleImageMsg`` an ``image`` one; a chat takes at most
``messages_per_minute`` (20) session-webhook messages a minute (130101); a markdown message needs a title
and a text (40035); ``/topapi/v2/user/get`` answers names from ``users`` (every sender of a built
message is one), or errcode 88 / sub_code 60011 when ``contact_permission`` is False.

``bubbles(conversation)`` is what a user sees in that conversation, in order: markdown messages, AI
cards (each card keeps every content it showed and whether it was finalised), files and images.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.server import ThreadedServer

BOT_TOPIC = "/v1.0/im/bot/messages/get"
CARD_TOPIC = "/v1.0/card/instances/callback"
#: How long the fake waits for a successful ACK before it counts the push as failed (an assumption).
ACK_DEADLINE = 5.0
#: Pause before each re-push of a callback that was not ACKed with 200 (an assumption).
RETRY_DELAYS = (1.0, 5.0, 30.0)
STATUS_OK = 200
#: The AI card's flowStatus values (dingtalk-stream ``AICardStatus``), as the strings cardParamMap carries.
FLOW_STATUSES = {"1": "processing", "2": "inputing", "3": "finished", "4": "executing", "5": "failed"}
TERMINAL_FLOW = ("3", "5")
MB = 1024 * 1024
#: Media upload type → (largest size, extensions), as DingTalk's "upload media files" page lists them.
MEDIA_RULES: dict[str, tuple[int, frozenset[str]]] = {
    "image": (20 * MB, frozenset({"jpg", "gif", "png", "bmp"})),
    "voice": (2 * MB, frozenset({"amr", "mp3", "wav"})),
    "video": (20 * MB, frozenset({"mp4"})),
    "file": (20 * MB, frozenset({"doc", "docx", "xls", "xlsx", "ppt", "pptx", "zip", "pdf", "rar"})),
}
#: groupMessages/send documents msgParam as at most 15,000 bytes.
MAX_MSG_PARAM = 15_000
STREAMING_FIELDS = ("outTrackId", "guid", "key", "content", "isFull", "isFinalize", "isError")


def _button_list(raw: str) -> bool:
    """Whether ``raw`` is what a loop-rendered button list can show: a JSON array of objects whose
    ``label`` and ``command`` (the fields the template binds) are strings."""
    try:
        items = json.loads(raw)
    except ValueError:
        return False
    return isinstance(items, list) and all(
        isinstance(i, dict) and isinstance(i.get("label"), str) and isinstance(i.get("command"), str)
        for i in items
    )


@dataclass
class Bubble:
    """One thing visible in a conversation: a markdown/text message or an AI card."""

    kind: str  # "markdown" | "text" | "card" | "file" | "image"
    conversation: str
    history: list[str] = field(default_factory=list)
    title: str | None = None
    ref: str | None = None  # outTrackId for cards
    template: str | None = None
    finalized: bool = False
    data: bytes | None = None  # a file message's bytes
    flow: list[str] = field(default_factory=list)  # a card's flowStatus values, in order
    params: dict[str, str] = field(default_factory=dict)  # a card's variables now
    streaming: bool = False  # created with callbackType STREAM
    stream_closed: bool = False  # a streaming update had isFinalize
    space: tuple[str, str] = ("", "")  # a card's delivery space: (IM_GROUP | IM_ROBOT, its id)
    actions_key: str | None = None  # the template's button-list variable (None: the template has none)

    @property
    def flow_status(self) -> str | None:
        return self.flow[-1] if self.flow else None

    @property
    def buttons(self) -> list[dict[str, str]]:
        """The buttons the card shows now (its button-list variable, as the template renders it)."""
        raw = self.params.get(self.actions_key or "")
        return json.loads(raw) if raw else []

    @property
    def button_labels(self) -> list[str]:
        return [b["label"] for b in self.buttons]

    @property
    def text(self) -> str:
        return self.history[-1] if self.history else ""


@dataclass
class Failure:
    path: str
    status: int
    errcode: int | None
    retry_after: float | None
    times: int


class FakeDingTalk(ThreadedServer):
    def __init__(
        self,
        client_id: str = "ding-app-key",
        client_secret: str = "ding-app-secret",
        corp_id: str = "ding-corp-1",
        token_ttl: int = 7200,
        ack_deadline: float = ACK_DEADLINE,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
        card_content_key: str = "content",
        card_actions_key: str | None = "actions",
    ) -> None:
        super().__init__()
        self.card_content_key = card_content_key
        self.card_actions_key = card_actions_key
        self.subscriptions: dict[str, list[str]] = {}  # ticket → the CALLBACK topics the app subscribed
        self._socket_topics: dict[int, list[str]] = {}  # id(websocket) → its connection's topics
        self.presses: list[str] = []  # stream messageIds of the card callbacks pushed by press_button
        self.ack_deadline = ack_deadline
        self.retry_delays = retry_delays
        self.ack_log: list[tuple[str, int]] = []  # (stream messageId, ACK code), in arrival order
        self.pushes: dict[str, int] = {}  # stream messageId → times pushed
        self.given_up: list[str] = []
        self.client_id = client_id
        self.client_secret = client_secret
        self.corp_id = corp_id
        self.token_ttl = token_ttl
        self.tokens: dict[str, float] = {}  # token → expires at (monotonic)
        self.rejected_tokens: list[str] = []
        self.acks: dict[str, dict[str, Any]] = {}  # stream messageId → ACK frame
        self.frames_sent: list[dict[str, Any]] = []
        self.connections_opened = 0
        self.files: dict[str, tuple[str, bytes]] = {}
        self.media: dict[str, tuple[str, bytes]] = {}  # uploaded by the bot: media_id → (name, bytes)
        self.media_types: dict[str, str] = {}  # media_id → the upload type it was accepted as
        self.cards: dict[str, Bubble] = {}
        self.users: dict[str, str] = {}  # staff id → name, for "query user details"
        self.contact_permission = True  # the app was granted qyapi_get_member (read user information)
        #: A robot sends at most 20 messages a minute to one chat (DingTalk's robot docs); past that the
        #: session webhook answers errcode 130101 "send too fast". (DingTalk then also blocks the robot
        #: for 10 minutes; the fake does not.)
        self.messages_per_minute = 20
        self._session_sends: dict[str, list[float]] = {}  # conversation → monotonic times of its sends
        self.groups_without_robot: set[str] = set()  # group conversation ids the robot was removed from
        self._delivery_failures: dict[str, str] = {}  # space id → errorMsg for its next delivery
        self._bubbles: list[Bubble] = []
        self._sessions: dict[str, str] = {}  # session id → conversation
        self._p2p: dict[str, str] = {}  # sender staff id → its one-to-one conversation id
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._failures: list[Failure] = []
        self.injected: list[dict[str, Any]] = []  # failures actually served: path, status, errcode
        self._ids = itertools.count(1)

    # --- routes --------------------------------------------------------------------------------
    def setup_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1.0/gateway/connections/open", self._open_connection)
        app.router.add_get("/gateway/ws", self._websocket)
        app.router.add_post("/v1.0/oauth2/accessToken", self._access_token)
        app.router.add_post("/v1.0/card/instances", self._card_create)
        app.router.add_post("/v1.0/card/instances/deliver", self._card_deliver)
        app.router.add_put("/v1.0/card/instances", self._card_update)
        app.router.add_put("/v1.0/card/streaming", self._card_streaming)
        app.router.add_post("/robot/sendBySession", self._send_by_session)
        app.router.add_post("/v1.0/robot/messageFiles/download", self._file_download)
        app.router.add_get("/files/{code}", self._file_bytes)
        app.router.add_post("/media/upload", self._media_upload)
        app.router.add_post("/topapi/v2/user/get", self._user_get)
        app.router.add_post("/v1.0/robot/oToMessages/batchSend", self._robot_send)
        app.router.add_post("/v1.0/robot/groupMessages/send", self._robot_send)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw.decode(errors="replace")}
        self.record(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "token": request.headers.get("x-acs-dingtalk-access-token"),
                "body": body,
                "at": time.time(),
            }
        )
        return body

    def _injected(self, path: str) -> web.Response | None:
        with self._lock:
            for failure in self._failures:
                if failure.path in path and failure.times > 0:
                    failure.times -= 1
                    break
            else:
                return None
            self.injected.append({"path": path, "status": failure.status, "errcode": failure.errcode})
        headers = {"Retry-After": f"{failure.retry_after:g}"} if failure.retry_after is not None else {}
        if failure.errcode is not None:
            payload = {
                "errcode": failure.errcode,
                "errmsg": "send too fast" if failure.errcode == 130101 else "error",
            }
        elif failure.status == 429:
            payload = {"code": "Throttling.Api", "message": "request was throttled"}
        else:
            payload = {"code": "InvalidParameter", "message": "injected failure"}
        return web.json_response(payload, status=failure.status, headers=headers)

    def _auth(self, request: web.Request) -> web.Response | None:
        token = request.headers.get("x-acs-dingtalk-access-token", "")
        expires = self.tokens.get(token)
        if expires is None or time.monotonic() >= expires:
            self.rejected_tokens.append(token)
            return web.json_response(
                {"code": "InvalidAuthentication", "message": "access token is invalid or expired"}, status=401
            )
        return None

    async def _open_connection(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if body.get("clientId") != self.client_id or body.get("clientSecret") != self.client_secret:
            return web.json_response({"code": "InvalidAuthentication", "message": "bad client"}, status=401)
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        self.subscriptions[ticket] = [
            str(sub.get("topic"))
            for sub in body.get("subscriptions") or []
            if isinstance(sub, dict) and sub.get("type") == "CALLBACK"
        ]
        return web.json_response({"endpoint": f"ws://{self.host}:{self.port}/gateway/ws", "ticket": ticket})

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("ticket") not in self._tickets:
            return web.Response(status=401, text="bad ticket")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._socket_topics[id(ws)] = self.subscriptions.get(request.query.get("ticket", ""), [])
        self._sockets.append(ws)
        self.connections_opened += 1
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                message_id = (frame.get("headers") or {}).get("messageId")
                if message_id:
                    with self._lock:
                        self.acks[message_id] = frame
                        self.ack_log.append((message_id, int(frame.get("code", 0))))
        finally:
            self._sockets.remove(ws)
            self._socket_topics.pop(id(ws), None)
        return ws

    async def _access_token(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if (failed := self._injected(request.path)) is not None:
            return failed
        if body.get("appKey") != self.client_id or body.get("appSecret") != self.client_secret:
            return web.json_response({"code": "invalidClientIdOrSecret", "message": "bad appKey"}, status=400)
        token = f"tok-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        self.tokens[token] = time.monotonic() + self.token_ttl
        return web.json_response({"accessToken": token, "expireIn": self.token_ttl})

    def _param_error(self, params: Any) -> web.Response | None:
        """cardParamMap is Map<String, String>; flowStatus must be one of the AI card's states; the
        button-list variable (an object array) must be a JSON-encoded array of buttons."""
        if not isinstance(params, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in params.items()
        ):
            return web.json_response(
                {"code": "param.invalid", "message": "cardParamMap must map strings to strings"}, status=400
            )
        if "flowStatus" in params and params["flowStatus"] not in FLOW_STATUSES:
            return web.json_response({"code": "param.invalid", "message": "unknown flowStatus"}, status=400)
        key = self.card_actions_key
        if key is not None and key in params and not _button_list(params[key]):
            return web.json_response(
                {"code": "param.invalid", "message": "the button list is not a JSON array of buttons"},
                status=400,
            )
        return None

    def _set_params(self, card: Bubble, params: dict[str, str]) -> None:
        card.params = params
        content = params.get(self.card_content_key, "")
        if not card.history or content != card.text:
            card.history.append(content)
        status = params.get("flowStatus")
        if status is not None and status != card.flow_status:
            card.flow.append(status)
        card.finalized = card.finalized or status == "3"

    async def _card_create(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if (failed := self._auth(request) or self._injected(request.path)) is not None:
            return failed
        if not body.get("cardTemplateId") or not body.get("outTrackId"):
            return web.json_response({"code": "param.invalid", "message": "missing template"}, status=400)
        params = (body.get("cardData") or {}).get("cardParamMap") or {}
        if (invalid := self._param_error(params)) is not None:
            return invalid
        card = Bubble("card", "", ref=body["outTrackId"], template=body["cardTemplateId"])
        card.streaming = body.get("callbackType") == "STREAM"
        card.actions_key = self.card_actions_key
        self._set_params(card, dict(params))
        self.cards[body["outTrackId"]] = card
        return web.json_response({"success": True, "result": body["outTrackId"]})

    async def _card_deliver(self, request: web.Request) -> web.Response:
        """``POST /v1.0/card/instances/deliver``: HTTP 200 with ``success`` and one ``result`` entry per
        space (``spaceId``, ``spaceType``, ``success``, ``errorMsg``), as DingTalk's card API answers. A
        space fails when its deliver model is missing (``imGroupOpenDeliverModel.robotCode`` for a group,
        ``imRobotOpenDeliverModel`` for a robot chat), when the robot is not in that group
        (``groups_without_robot``) or when a test said so (``fail_delivery``)."""
        body = await self._body(request)
        if (failed := self._auth(request) or self._injected(request.path)) is not None:
            return failed
        card = self.cards.get(body.get("outTrackId", ""))
        space = str(body.get("openSpaceId", ""))
        if card is None or not space.startswith("dtv1.card//"):
            return web.json_response({"code": "param.invalid", "message": "unknown card"}, status=400)
        space_type, _, space_id = space[len("dtv1.card//") :].partition(".")
        card.conversation = space_id if space_type == "IM_GROUP" else self._p2p.get(space_id, space_id)
        card.space = (space_type, space_id)
        if space_type == "IM_GROUP":
            model = body.get("imGroupOpenDeliverModel")
            error = None if isinstance(model, dict) and model.get("robotCode") else "robotCode is required"
            if error is None and space_id in self.groups_without_robot:
                error = "the robot is not a member of this group"
        elif space_type == "IM_ROBOT":
            error = None if isinstance(body.get("imRobotOpenDeliverModel"), dict) else "deliver model missing"
        else:
            error = f"unsupported space type {space_type}"
        with self._lock:
            error = self._delivery_failures.pop(space_id, error)
        result = {"spaceType": space_type, "spaceId": space_id, "success": error is None}
        if error is not None:
            result["errorMsg"] = error
            return web.json_response({"success": True, "result": [result]})
        if body.get("userIdType") is None:
            return web.json_response({"success": True, "result": [result]})  # but the card never appears
        with self._lock:
            self._bubbles.append(card)
        return web.json_response({"success": True, "result": [result]})

    async def _card_update(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if (failed := self._auth(request) or self._injected(request.path)) is not None:
            return failed
        card = self.cards.get(body.get("outTrackId", ""))
        if card is None:
            return web.json_response({"code": "param.invalid", "message": "card not found"}, status=400)
        params = (body.get("cardData") or {}).get("cardParamMap")
        if params is None:
            return web.json_response({"code": "param.invalid", "message": "cardData is required"}, status=400)
        if (invalid := self._param_error(params)) is not None:
            return invalid
        by_key = bool((body.get("cardUpdateOptions") or {}).get("updateCardDataByKey"))
        self._set_params(card, {**card.params, **params} if by_key else dict(params))
        return web.json_response({"success": True, "result": True})

    async def _card_streaming(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if (failed := self._auth(request) or self._injected(request.path)) is not None:
            return failed
        if missing := [f for f in STREAMING_FIELDS if body.get(f) is None]:
            return web.json_response(
                {"code": "param.invalid", "message": f"missing {', '.join(missing)}"}, status=400
            )
        card = self.cards.get(body.get("outTrackId", ""))
        if card is None:
            return web.json_response({"code": "param.invalid", "message": "card not found"}, status=400)
        if not card.streaming:
            return web.json_response({"code": "system.error", "message": "not a streaming card"}, status=500)
        if body["key"] != self.card_content_key:
            return web.json_response({"code": "param.invalid", "message": "key is not streamed"}, status=400)
        if card.flow_status in TERMINAL_FLOW or card.stream_closed:
            return web.json_response({"code": "param.invalid", "message": "card stream ended"}, status=400)
        content = str(body["content"])
        text = content if body["isFull"] else card.text + content
        card.params = {**card.params, self.card_content_key: text}
        card.history.append(text)
        if body["isFinalize"]:
            card.finalized = card.stream_closed = True
        return web.json_response({"success": True})

    async def _send_by_session(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if (failed := self._injected(request.path)) is not None:
            return failed
        conversation = self._sessions.get(request.query.get("session", ""))
        if conversation is None:
            return web.json_response({"errcode": 300001, "errmsg": "session does not exist"})
        now = time.monotonic()
        with self._lock:
            sent = [t for t in self._session_sends.get(conversation, []) if now - t < 60.0]
            if len(sent) >= self.messages_per_minute:
                return web.json_response(
                    {"errcode": 130101, "errmsg": "send too fast, exceed 20 times per minute"}
                )
        kind = body.get("msgtype")
        if kind == "markdown":
            md = body.get("markdown") or {}
            if not md.get("title") or not md.get("text"):
                return web.json_response(
                    {"errcode": 40035, "errmsg": "缺少参数 markdown.title / markdown.text"}
                )
            bubble = Bubble("markdown", conversation, [str(md.get("text", ""))], title=md.get("title"))
        elif kind == "text":
            bubble = Bubble("text", conversation, [str((body.get("text") or {}).get("content", ""))])
        else:
            return web.json_response({"errcode": 40035, "errmsg": "unsupported msgtype"})
        with self._lock:
            self._session_sends[conversation] = [*sent, now]
            self._bubbles.append(bubble)
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    async def _file_download(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if (failed := self._auth(request) or self._injected(request.path)) is not None:
            return failed
        code = str(body.get("downloadCode", ""))
        if code not in self.files or body.get("robotCode") != self.client_id:
            return web.json_response({"code": "param.invalid", "message": "bad downloadCode"}, status=400)
        return web.json_response({"downloadUrl": f"{self.url}/files/{code}"})

    async def _file_bytes(self, request: web.Request) -> web.Response:
        self.record({"method": "GET", "path": request.path, "at": time.time()})
        entry = self.files.get(request.match_info["code"])
        if entry is None:
            return web.Response(status=404)
        return web.Response(body=entry[1], content_type="application/octet-stream")

    async def _media_upload(self, request: web.Request) -> web.Response:
        """The old ``oapi`` host: token in the query, multipart body, errcode-style answers.

        As DingTalk's "upload media files" page says: ``type`` is image/voice/video/file, each with its
        extensions and largest size (``MEDIA_RULES``); a wrong type is errcode 40004, an extension the
        type does not take 40005, a file over the type's size (or empty) 40006 (the global codes'
        numbers; which of them DingTalk gives for which case is our reading, not verified live).
        """
        form = await request.post()
        media = form.get("media")
        media_type = request.query.get("type") or str(form.get("type") or "")
        self.record(
            {
                "method": "POST",
                "path": request.path,
                "query": {"type": media_type},
                "token": request.query.get("access_token"),
                "name": getattr(media, "filename", None),
                "at": time.time(),
            }
        )
        if (failed := self._injected(request.path)) is not None:
            return failed
        expires = self.tokens.get(request.query.get("access_token", ""))
        if expires is None or time.monotonic() >= expires:
            return web.json_response({"errcode": 40014, "errmsg": "不合法的access_token"})
        if media is None or not hasattr(media, "file"):
            return web.json_response({"errcode": 41005, "errmsg": "缺少多媒体文件数据"})
        if media_type not in MEDIA_RULES:
            return web.json_response({"errcode": 40004, "errmsg": "不合法的媒体文件类型"})
        limit, extensions = MEDIA_RULES[media_type]
        name = str(media.filename or "")
        if name.rsplit(".", 1)[-1].lower() not in extensions or "." not in name:
            return web.json_response({"errcode": 40005, "errmsg": "不合法的文件类型"})
        data = media.file.read()
        if not 0 < len(data) <= limit:
            return web.json_response({"errcode": 40006, "errmsg": "不合法的文件大小"})
        media_id = f"@media-{next(self._ids)}"
        self.media[media_id] = (name, data)
        self.media_types[media_id] = media_type
        return web.json_response(
            {
                "errcode": 0,
                "errmsg": "ok",
                "media_id": media_id,
                "type": media_type,
                "created_at": int(time.time()),
            }
        )

    async def _user_get(self, request: web.Request) -> web.Response:
        """ "Query user details" on the oapi host: token in the query, ``userid`` in the body, HTTP 200 with
        errcode. Needs the ``qyapi_get_member`` permission: without it (``contact_permission = False``)
        errcode 88, sub_code 60011 ("no permission to call this API"); an unknown user is 60121."""
        body = await self._body(request)
        if (failed := self._injected(request.path)) is not None:
            return failed
        expires = self.tokens.get(request.query.get("access_token", ""))
        if expires is None or time.monotonic() >= expires:
            return web.json_response({"errcode": 40014, "errmsg": "不合法的access_token"})
        if not self.contact_permission:
            return web.json_response(
                {
                    "errcode": 88,
                    "sub_code": "60011",
                    "sub_msg": "没有调用该接口的权限",
                    "errmsg": "ding talk error[subcode=60011,submsg=没有调用该接口的权限]",
                }
            )
        userid = str(body.get("userid") or "")
        if not userid:
            return web.json_response({"errcode": 40035, "errmsg": "缺少参数 userid"})
        if userid not in self.users:
            return web.json_response({"errcode": 60121, "errmsg": "找不到该用户"})
        return web.json_response(
            {"errcode": 0, "errmsg": "ok", "result": {"userid": userid, "name": self.users[userid]}}
        )

    def _robot_param_error(self, key: Any, param: dict[str, Any]) -> str | None:
        """What is wrong with a robot message's msgKey/msgParam (None: nothing). Files need a ``file``
        media id, pictures an ``image`` media id (or a URL) in ``photoURL``."""
        if key == "sampleMarkdown":
            return None if param.get("title") and param.get("text") else "title and text are required"
        if key == "sampleFile":
            media_id = param.get("mediaId")
            if self.media_types.get(media_id) != "file":
                return "mediaId is not an uploaded file"
            return (
                None
                if param.get("fileName") and param.get("fileType")
                else "fileName and fileType are required"
            )
        if key == "sampleImageMsg":
            photo = str(param.get("photoURL") or "")
            return (
                None if self.media_types.get(photo) == "image" or photo.startswith("http") else "bad photoURL"
            )
        return f"msgKey {key!r} is not supported here"

    async def _robot_send(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if (failed := self._auth(request) or self._injected(request.path)) is not None:
            return failed
        raw_param = str(body.get("msgParam") or "{}")
        if len(raw_param.encode()) > MAX_MSG_PARAM:
            return web.json_response({"code": "param.invalid", "message": "msgParam is too long"}, status=400)
        param = json.loads(raw_param)
        key = body.get("msgKey")
        if not body.get("robotCode") or (error := self._robot_param_error(key, param)) is not None:
            why = "robotCode is required" if not body.get("robotCode") else error
            return web.json_response({"code": "param.invalid", "message": why}, status=400)
        if "openConversationId" in body:
            conversation = str(body["openConversationId"])
        else:
            [user] = body.get("userIds") or [""]
            conversation = self._p2p.get(user, user)
        if key == "sampleMarkdown":
            bubble = Bubble("markdown", conversation, [str(param.get("text", ""))], title=param.get("title"))
        elif key == "sampleImageMsg":
            name, data = self.media.get(param["photoURL"], (param["photoURL"], b""))
            bubble = Bubble("image", conversation, [name], data=data)
        else:
            name, data = self.media[param["mediaId"]]
            bubble = Bubble("file", conversation, [param.get("fileName") or name], data=data)
        with self._lock:
            self._bubbles.append(bubble)
        answer: dict[str, Any] = {"processQueryKey": uuid.uuid4().hex}
        if "openConversationId" not in body:
            answer |= {"invalidStaffIdList": [], "flowControlledStaffIdList": []}
        return web.json_response(answer)

    # --- injection API -------------------------------------------------------------------------
    def p2p_conversation(self, sender_id: str) -> str:
        """The one-to-one conversation id between ``sender_id`` and the robot."""
        return self._p2p.setdefault(sender_id, f"cid-p2p-{sender_id}")

    def add_file(self, download_code: str, data: bytes, name: str = "file.bin") -> None:
        self.files[download_code] = (name, data)

    def build_message(
        self,
        conversation_type: str,
        text: str = "",
        sender_id: str = "user-1",
        conversation_id: str | None = None,
        *,
        at_bot: bool = False,
        msg_id: str | None = None,
        msgtype: str = "text",
        download_code: str | None = None,
        file_name: str | None = None,
        sender_nick: str | None = None,
        webhook_ttl: float = 5400,
        recognition: str | None = None,
        duration_ms: int = 2000,
    ) -> dict[str, Any]:
        """The ``data`` of a robot-message callback, shaped like DingTalk's.

        An ``audio`` message carries ``duration`` (ms), its ``downloadCode`` and DingTalk's own speech
        ``recognition`` text, and no file name."""
        now_ms = int(time.time() * 1000)
        if conversation_type == "1":
            conversation_id = conversation_id or self.p2p_conversation(sender_id)
            self._p2p[sender_id] = conversation_id
        else:
            conversation_id = conversation_id or "cid-group-1"
        session = uuid.uuid4().hex
        self._sessions[session] = conversation_id
        self.users.setdefault(sender_id, sender_nick or sender_id.title())
        data: dict[str, Any] = {
            "conversationId": conversation_id,
            "chatbotCorpId": self.corp_id,
            "chatbotUserId": "$:LWCP_v1:$robot",
            "msgId": msg_id or f"msg{uuid.uuid4().hex[:16]}",
            "senderNick": sender_nick or sender_id.title(),
            "isAdmin": False,
            "senderStaffId": sender_id,
            "sessionWebhookExpiredTime": now_ms + int(webhook_ttl * 1000),
            "createAt": now_ms,
            "senderCorpId": self.corp_id,
            "conversationType": conversation_type,
            "senderId": f"$:LWCP_v1:${sender_id}",
            "sessionWebhook": f"{self.url}/robot/sendBySession?session={session}",
            "robotCode": self.client_id,
            "msgtype": msgtype,
        }
        if conversation_type == "2":
            data["isInAtList"] = at_bot
            data["conversationTitle"] = "Team room"
            if at_bot:
                data["atUsers"] = [{"dingtalkId": "$:LWCP_v1:$robot"}]
        if msgtype == "text":
            data["text"] = {"content": (" " if at_bot else "") + text}
        elif msgtype == "picture":
            data["content"] = {"downloadCode": download_code, "pictureDownloadCode": download_code}
        elif msgtype == "audio":
            data["content"] = {"duration": duration_ms, "downloadCode": download_code}
            if recognition is not None:
                data["content"]["recognition"] = recognition
        elif msgtype in ("file", "video"):
            data["content"] = {"downloadCode": download_code, "fileName": file_name or "file.bin"}
        elif msgtype == "richText":
            items: list[dict[str, Any]] = [{"text": text}] if text else []
            if download_code:
                items.append({"type": "picture", "downloadCode": download_code})
            data["content"] = {"richText": items}
        return data

    def send_bot_message(
        self,
        conversation_type: str,
        text: str = "",
        sender_id: str = "user-1",
        conversation_id: str | None = None,
        at_bot: bool = False,
        msg_id: str | None = None,
        msgtype: str = "text",
        download_code: str | None = None,
        **kwargs: Any,
    ) -> str:
        """Push a robot message to the connected client. Returns the stream frame's messageId (for ACKs)."""
        data = self.build_message(
            conversation_type,
            text,
            sender_id,
            conversation_id,
            at_bot=at_bot,
            msg_id=msg_id,
            msgtype=msgtype,
            download_code=download_code,
            **kwargs,
        )
        return self.push_callback(data)

    def push_callback(self, data: dict[str, Any], topic: str = BOT_TOPIC, *, redeliver: bool = True) -> str:
        """Push one callback frame; unless ``redeliver=False`` it is pushed again until ACKed with 200."""
        message_id = uuid.uuid4().hex
        frame = {
            "specVersion": "1.0",
            "type": "CALLBACK",
            "headers": {
                "appId": "fake-app",
                "connectionId": "fake-connection",
                "contentType": "application/json",
                "messageId": message_id,
                "time": str(int(time.time() * 1000)),
                "topic": topic,
            },
            "data": json.dumps(data),
        }

        async def push() -> None:
            before = self._acks_of(message_id)
            await self._send(frame)
            if redeliver:
                self.redeliver(self._repush_until_acked(frame, before))

        self.call(push)
        return message_id

    def _acks_of(self, message_id: str) -> int:
        with self._lock:
            return sum(1 for mid, _ in self.ack_log if mid == message_id)

    def _ack_since(self, message_id: str, index: int) -> int | None:
        """The first ACK code after the ``index``-th ACK of ``message_id`` (None while none came)."""
        with self._lock:
            codes = [code for mid, code in self.ack_log if mid == message_id][index:]
        return codes[0] if codes else None

    async def _repush_until_acked(self, frame: dict[str, Any], before: int) -> None:
        """Runs on the server loop: push ``frame`` again until a 200 ACK arrives within the deadline."""
        message_id = frame["headers"]["messageId"]
        loop = asyncio.get_running_loop()
        for attempt in range(len(self.retry_delays) + 1):
            if attempt:
                await asyncio.sleep(self.retry_delays[attempt - 1])
                while not self._sockets:  # the app is away (restarting): push when it is back
                    await asyncio.sleep(0.05)
                before = self._acks_of(message_id)
                try:
                    await self._send(frame)
                except (RuntimeError, ConnectionError):
                    continue
            deadline = loop.time() + self.ack_deadline
            while loop.time() < deadline and self._ack_since(message_id, before) is None:
                await asyncio.sleep(0.02)
            if self._ack_since(message_id, before) == STATUS_OK and loop.time() <= deadline + 0.05:
                return
        with self._lock:
            self.given_up.append(message_id)

    async def _send(self, frame: dict[str, Any]) -> None:
        if not self._sockets:
            raise RuntimeError("no DingTalk stream client is connected")
        message_id = (frame.get("headers") or {}).get("messageId", "")
        with self._lock:
            self.frames_sent.append(frame)
            self.pushes[message_id] = self.pushes.get(message_id, 0) + 1
        await self._sockets[-1].send_str(json.dumps(frame))

    def button_callback(self, card: Bubble, label: str, user_id: str = "user-1") -> dict[str, Any]:
        """The ``data`` of the card callback DingTalk sends when ``user_id`` presses ``label`` on ``card``
        (see :meth:`press_button`); LookupError for a button the card does not show now."""
        shown = card.buttons
        button = next((b for b in shown if b["label"] == label), None)
        if button is None:
            labels = ", ".join(b["label"] for b in shown) or "none"
            raise LookupError(f"card {card.ref} shows no button {label!r} (it shows: {labels})")
        space_type, space_id = card.space
        return {
            "extension": "{}",
            "corpId": self.corp_id,
            "spaceType": space_type,
            "spaceId": space_id,
            "userIdType": 1,
            "type": "actionCallback",
            "userId": user_id,
            "outTrackId": card.ref,
            "content": json.dumps(
                {
                    "cardPrivateData": {
                        "actionIds": [f"button_{shown.index(button)}"],
                        "params": {"command": button["command"]},
                    }
                }
            ),
        }

    def press_button(self, card: Bubble, label: str, user_id: str = "user-1") -> str:
        """``user_id`` presses the button ``label`` on ``card``: a card callback over the stream.

        Shaped like DingTalk's card callback (``/v1.0/card/instances/callback``): outTrackId, corpId,
        userId (a staff id: ``userIdType`` 1), the delivery space, and ``content`` — a JSON string whose
        ``cardPrivateData`` has the pressed component's ``actionIds`` and its callback ``params``; the
        template's button sends its list item's ``command``. Redelivered until ACKed with 200, like any
        callback. Refused (LookupError) for a button the card does not show now, and (RuntimeError) when
        no callback could arrive: a card not created with callbackType STREAM, or an app that did not
        subscribe to the card topic. Returns the frame's messageId.
        """
        data = self.button_callback(card, label, user_id)
        if not card.streaming:
            raise RuntimeError("the card was not created with callbackType STREAM: no callback on the stream")
        if not self._sockets or CARD_TOPIC not in self._socket_topics.get(id(self._sockets[-1]), []):
            raise RuntimeError(f"the connected app did not subscribe to {CARD_TOPIC}")
        message_id = self.push_callback(data, CARD_TOPIC)
        with self._lock:
            self.presses.append(message_id)
        return message_id

    def push_again(self, message_id: str) -> None:
        """Push an earlier frame again, unchanged (same messageId), as the gateway does when it did not
        see the ACK in time."""
        with self._lock:
            frame = next(f for f in self.frames_sent if f["headers"]["messageId"] == message_id)
        self._push(frame)

    def ping(self) -> str:
        """A SYSTEM ping, as the gateway sends; the client must ACK it with the same data."""
        message_id = uuid.uuid4().hex
        frame = {
            "specVersion": "1.0",
            "type": "SYSTEM",
            "headers": {"contentType": "application/json", "messageId": message_id, "topic": "ping"},
            "data": json.dumps({"opaque": message_id}),
        }
        self._push(frame)
        return message_id

    def _push(self, frame: dict[str, Any]) -> None:
        self.call(lambda: self._send(frame))

    def disconnect_clients(self, code: int = 1000) -> None:
        """Drop every stream connection (the client should reconnect); e.g. ``code=1011`` for a gateway
        error rather than a normal close."""

        async def close() -> None:
            for ws in list(self._sockets):
                await ws.close(code=code)

        self.call(close)

    def fail_delivery(self, space_id: str, error_msg: str = "the user cannot receive this card") -> None:
        """The next card delivered to ``space_id`` (a group's conversation id or a staff id) fails for
        that space: HTTP 200, ``result[0].success`` false with ``errorMsg`` — the card shows nowhere."""
        with self._lock:
            self._delivery_failures[space_id] = error_msg

    def fail_next(
        self,
        path_substring: str,
        status: int = 429,
        errcode: int | None = None,
        *,
        times: int = 1,
        retry_after: float | None = None,
    ) -> None:
        """The next ``times`` calls whose path contains ``path_substring`` fail with ``status``.

        With ``errcode`` the answer is DingTalk's HTTP-200-with-errcode dialect (``130101`` = send too fast).
        """
        with self._lock:
            self._failures.append(
                Failure(path_substring, 200 if errcode is not None else status, errcode, retry_after, times)
            )

    # --- views ---------------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return bool(self._sockets)

    @property
    def open_connections(self) -> int:
        """Stream clients connected right now (more than one means a client was left running)."""
        return len(self._sockets)

    def calls(self, path_substring: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if path_substring in r["path"]]

    def ack_code(self, message_id: str) -> int | None:
        """The status code the client ACKed a pushed frame with (None while not yet ACKed)."""
        with self._lock:
            frame = self.acks.get(message_id)
        return None if frame is None else int(frame.get("code", 0))

    async def wait_ack(self, message_id: str, timeout: float = 20.0) -> int:
        return await self.wait_for(lambda: self.ack_code(message_id), timeout)

    def bubbles(self, conversation: str) -> list[Bubble]:
        with self._lock:
            return [b for b in self._bubbles if b.conversation == conversation]

    def markdown_texts(self, conversation: str) -> list[str]:
        return [b.text for b in self.bubbles(conversation) if b.kind in ("markdown", "text")]

    def card_bubbles(self, conversation: str) -> list[Bubble]:
        return [b for b in self.bubbles(conversation) if b.kind == "card"]

    def all_bubbles(self) -> list[Bubble]:
        with self._lock:
            return list(self._bubbles)

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 20.0) -> Any:
        """Poll ``predicate`` until it returns something truthy; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s")
            await asyncio.sleep(0.02)
