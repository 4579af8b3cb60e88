"""The Feishu/Lark open-platform calls the channel makes, on lark-oapi's async methods, with one error map.

Why a wrapper: lark-oapi's ``a…`` methods are async for the request itself, but fetch the tenant token
with blocking ``requests`` inside ``verify()``. So the client is built with ``enable_set_token(True)`` and
every call first obtains the token through the SDK's own cache on a worker thread
(:meth:`LarkApi.tenant_token`): the cache refreshes 10 minutes before the 2-hour expiry, and nothing
blocks the service's event loop. A token the platform rejects anyway is forgotten and the call retried once.

Feishu meters two things per object rather than per app, and this layer keeps every call inside them
(:class:`WindowLimit`), whatever pacing the caller uses: a message may be PATCHed 5 times a second
("单条消息更新频控为 5 QPS"), and a card entity takes 10 card/element calls a second ("对于单个卡片实体，
使用卡片和组件级 OpenAPI 操作卡片的频率上限为 10 次/秒").
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import lark_oapi as lark
import requests
from lark_oapi.api.cardkit.v1 import (
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    DeleteCardElementRequest,
    DeleteCardElementRequestBody,
    SettingsCardRequest,
    SettingsCardRequestBody,
)
from lark_oapi.api.contact.v3 import GetUserRequest
from lark_oapi.api.im.v1 import (
    CreateFileRequest,
    CreateFileRequestBody,
    CreateImageRequest,
    CreateImageRequestBody,
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    Emoji,
    GetMessageResourceRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.enum import AccessTokenType, HttpMethod
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.model import BaseRequest, RequestOption
from lark_oapi.core.token.manager import TokenManager

from channels.errors import (
    BadRequest,
    ChannelError,
    EditFailed,
    Forbidden,
    NetworkError,
    RetryAfter,
)

log = logging.getLogger(__name__)

#: ``code`` values that mean "slow down" (the generic gateway limit and the IM per-chat limits).
RATE_LIMIT_CODES = frozenset({99991400, 230020, 11232, 11233})
#: The bot may not do this: scope missing, bot not in the chat, bot capability off, user out of range.
FORBIDDEN_CODES = frozenset({99991672, 99991679, 230002, 230006, 230013, 230027, 232011})
#: CardKit refusals that mean "this card cannot stream any more": streaming closed (300309) or closed by
#: Feishu's 10-minute timeout (200850) — both fixed by switching streaming mode on again.
STREAMING_CLOSED_CODES = frozenset({300309, 200850})
#: CardKit "try again shortly": the card is in a user's button interaction (200810: "wait for the
#: interaction to end, then update again" — it ends when the callback is answered, within 3 s), or a
#: server error whose advice is "make sure the sequence grows, then retry later" (300120).
CARD_BUSY_CODES = frozenset({200810, 300120})
#: Contact lookups Feishu refuses for this user or app: outside the app's contact range (41050), no such
#: user (41012), or no contact scope (99991672/99991679, in FORBIDDEN_CODES).
USER_REFUSED_CODES = frozenset({41050, 41012})
#: The tenant token was rejected: refetch it once, then give up.
TOKEN_CODES = frozenset({99991661, 99991663, 99991668})
DEFAULT_RETRY_AFTER = 1.0
#: How long to wait before trying a busy card again (a callback answer usually comes within ~0.1 s).
CARD_BUSY_RETRY = 0.3
#: Feishu's per-object rates, and the window they are counted in (a second, and a little margin).
MESSAGE_PATCHES_PER_SECOND = 5
CARD_CALLS_PER_SECOND = 10
RATE_WINDOW = 1.05
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tiff", ".ico"})
FILE_TYPES = {".pdf": "pdf", ".doc": "doc", ".docx": "doc", ".xls": "xls", ".xlsx": "xls"}
FILE_TYPES |= {".ppt": "ppt", ".pptx": "ppt", ".mp4": "mp4", ".opus": "opus"}


class StreamingClosed(EditFailed):
    """The card entity is no longer in streaming mode (closed, or Feishu's 10-minute limit passed)."""


class CardBusy(RetryAfter):
    """The card cannot be updated *right now* (a button press is being answered): try again shortly.

    A :class:`RetryAfter`, so a caller that does not know it still waits and keeps the card, instead of
    treating the card as broken.
    """


class UserRefused(Forbidden):
    """Feishu will not tell this app who the user is: ``app_wide`` when the app lacks the contact scope
    (nobody can be looked up), else this user only (outside the app's contact range, unknown id)."""

    def __init__(self, message: str, *, app_wide: bool = False) -> None:
        super().__init__(message)
        self.app_wide = app_wide


class WindowLimit:
    """At most ``calls`` calls per ``window`` seconds for each key (a message id, a card id).

    Why not the reply's pacing: that is per chat and configurable (``edit_interval_seconds``); these are
    the platform's hard per-object limits, which no configuration may exceed. A call is counted from
    when its answer came back: Feishu saw it arrive before that, so a call that starts a full window
    after the answer of the call ``calls`` places earlier cannot arrive within the platform's second,
    however long the request took on the way (a token refresh, a busy machine). Keys are bounded (LRU).
    """

    def __init__(self, calls: int, window: float, max_keys: int = 4096) -> None:
        self.calls = calls
        self.window = window
        self.max_keys = max_keys
        #: Per key, one cell per recent call: when its answer came back (None while still on the wire).
        self._ends: OrderedDict[str, list[list[float | None]]] = OrderedDict()

    @asynccontextmanager
    async def slot(self, key: str) -> AsyncIterator[None]:
        """Wait until a call for ``key`` may go, then hold its place until the call has returned."""
        ends = self._take(key)
        while True:
            now = time.monotonic()
            ends[:] = [cell for cell in ends if cell[0] is None or cell[0] > now - self.window]
            if len(ends) < self.calls:
                break
            finished = [cell[0] for cell in ends if cell[0] is not None]
            # All places held by calls still on the wire: one of them returns soon.
            await asyncio.sleep(min(finished) + self.window - now if finished else 0.05)
        cell: list[float | None] = [None]
        ends.append(cell)
        try:
            yield
        finally:
            cell[0] = time.monotonic()

    def _take(self, key: str) -> list[list[float | None]]:
        ends = self._ends.get(key)
        if ends is None:
            ends = self._ends[key] = []
            if len(self._ends) > self.max_keys:
                self._ends.popitem(last=False)
        self._ends.move_to_end(key)
        return ends


def map_error(
    status: int | None,
    code: int | None,
    msg: str | None,
    headers: Mapping[str, str] | None,
    *,
    editing: bool = False,
) -> ChannelError:
    """The one place a failed Feishu call becomes a :mod:`channels.errors` type.

    ``editing`` marks a card PATCH: any failure there that is not a rate limit, a permission problem or a
    transport fault means this card cannot be updated (recalled, deleted, too old, rejected card JSON),
    which the reply stream answers by posting the text as a new message.
    """
    text = f"feishu error {code}: {msg or 'no message'} (HTTP {status})"
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    if status == 429 or code in RATE_LIMIT_CODES:
        reset = lowered.get("x-ogw-ratelimit-reset")
        try:
            wait = float(reset) if reset is not None else DEFAULT_RETRY_AFTER
        except ValueError:
            wait = DEFAULT_RETRY_AFTER
        return RetryAfter(wait, text)
    if code in FORBIDDEN_CODES or status == 403:
        return Forbidden(text)
    if code in STREAMING_CLOSED_CODES:
        return StreamingClosed(text)
    if code in CARD_BUSY_CODES:
        return CardBusy(CARD_BUSY_RETRY, text)
    if status is not None and status >= 500 and not code:
        return NetworkError(text)
    if editing:
        return EditFailed(text)
    if status is not None and status >= 500:
        return NetworkError(text)
    return BadRequest(text)


def _file_type(path: Path) -> str:
    return FILE_TYPES.get(path.suffix.lower(), "stream")


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


class LarkApi:
    """A thin async facade over ``lark.Client`` for the IM calls a chat channel needs."""

    def __init__(self, app_id: str, app_secret: str, domain: str, *, timeout: float = 30.0) -> None:
        self.app_id = app_id
        self.client = (
            lark.Client.builder()
            .app_id(app_id)
            .app_secret(app_secret)
            .domain(domain)
            .enable_set_token(True)
            .timeout(timeout)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )
        self.message_rate = WindowLimit(MESSAGE_PATCHES_PER_SECOND, RATE_WINDOW)
        self.card_rate = WindowLimit(CARD_CALLS_PER_SECOND, RATE_WINDOW)

    # --- token ------------------------------------------------------------------------------------
    async def tenant_token(self) -> str:
        """A valid tenant token from the SDK's cache, fetched/refreshed on a worker thread if needed."""
        try:
            return await asyncio.to_thread(TokenManager.get_self_tenant_token, self.client.config)
        except ObtainAccessTokenException as exc:
            code = getattr(exc, "code", None)
            raise Forbidden(
                f"feishu rejected the app credentials (code {code}): {getattr(exc, 'msg', '')}"
            ) from None
        except requests.RequestException as exc:
            raise NetworkError(f"feishu token endpoint unreachable: {type(exc).__name__}") from None
        except ValueError as exc:  # a non-JSON answer (proxy error page, 5xx)
            raise NetworkError(f"feishu token endpoint gave an unreadable answer: {exc}") from None

    def forget_token(self) -> None:
        # The SDK's cache has no delete; an already-expired entry is treated as missing.
        TokenManager.cache.set(f"self_tenant_token:{self.app_id}", "", 0)

    # --- the call wrapper ---------------------------------------------------------------------------
    async def call(
        self,
        fn: Callable[[Any, RequestOption], Awaitable[Any]],
        make_request: Callable[[], Any],
        *,
        editing: bool = False,
        binary: bool = False,
        refused: frozenset[int] = frozenset(),
    ) -> Any:
        """Run one SDK call; return the response on ``code == 0``, raise a mapped ChannelError otherwise.

        ``make_request`` builds a fresh request per attempt: the SDK consumes upload streams from the body.
        ``refused`` codes raise :class:`UserRefused` (for calls where they mean "not for this app").
        """
        for attempt in (1, 2):
            token = await self.tenant_token()
            option = RequestOption.builder().tenant_access_token(token).build()
            try:
                response = await fn(make_request(), option)
            except httpx.HTTPError as exc:
                raise NetworkError(f"feishu unreachable: {type(exc).__name__}") from None
            except ValueError as exc:  # the SDK could not parse the body (e.g. an HTML 502 page)
                raise NetworkError(f"feishu gave an unreadable answer: {exc}") from None
            raw = getattr(response, "raw", None)
            status = getattr(raw, "status_code", None)
            code = getattr(response, "code", None)
            if code == 0 and (binary or status is None or status < 400):
                return response
            if code in TOKEN_CODES and attempt == 1:
                log.info("feishu rejected the cached tenant token; fetching a new one")
                self.forget_token()
                continue
            if code in refused:
                raise UserRefused(f"feishu error {code}: {getattr(response, 'msg', None) or 'refused'}")
            headers = getattr(raw, "headers", None) or {}
            raise map_error(status, code, getattr(response, "msg", None), headers, editing=editing)
        raise AssertionError("unreachable")

    # --- operations ----------------------------------------------------------------------------------
    async def bot_info(self) -> dict[str, Any]:
        """``GET /open-apis/bot/v3/info``: the bot's own ``open_id`` and name (no typed SDK method)."""

        def make() -> BaseRequest:
            return (
                BaseRequest.builder()
                .http_method(HttpMethod.GET)
                .uri("/open-apis/bot/v3/info")
                .token_types({AccessTokenType.TENANT})
                .build()
            )

        response = await self.call(self.client.arequest, make)
        try:
            body = json.loads(response.raw.content)
        except ValueError as exc:
            raise NetworkError(f"feishu bot info was unreadable: {exc}") from None
        bot = body.get("bot") or body.get("data", {}).get("bot") or {}
        return bot if isinstance(bot, dict) else {}

    async def reply(self, message_id: str, msg_type: str, content: str, *, in_thread: bool = False) -> str:
        body = ReplyMessageRequestBody.builder().msg_type(msg_type).content(content)
        if in_thread:
            body = body.reply_in_thread(True)
        request = ReplyMessageRequest.builder().message_id(message_id).request_body(body.build()).build()
        response = await self.call(self.client.im.v1.message.areply, lambda: request)
        return str(response.data.message_id)

    async def create(self, chat_id: str, msg_type: str, content: str) -> str:
        body = (
            CreateMessageRequestBody.builder().receive_id(chat_id).msg_type(msg_type).content(content).build()
        )
        request = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
        response = await self.call(self.client.im.v1.message.acreate, lambda: request)
        return str(response.data.message_id)

    async def patch(self, message_id: str, content: str) -> None:
        body = PatchMessageRequestBody.builder().content(content).build()
        request = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        async with self.message_rate.slot(message_id):
            await self.call(self.client.im.v1.message.apatch, lambda: request, editing=True)

    async def user_name(self, open_id: str) -> str | None:
        """``GET /open-apis/contact/v3/users/:open_id``: the user's display name, or None when the app
        may see the user but not the name (the field needs ``contact:user.base:readonly``).

        Raises :class:`UserRefused` when Feishu will not look the user up for this app (no contact
        scope, the user outside the app's contact range, an unknown id); other errors as mapped.
        """
        request = GetUserRequest.builder().user_id(open_id).user_id_type("open_id").build()
        try:
            response = await self.call(
                self.client.contact.v3.user.aget, lambda: request, refused=USER_REFUSED_CODES
            )
        except UserRefused:
            raise
        except Forbidden as exc:  # no contact scope for this app
            raise UserRefused(str(exc), app_wide=True) from None
        user = getattr(response.data, "user", None)
        name = getattr(user, "name", None)
        return str(name) if name else None

    # --- CardKit (card entities, streaming) ------------------------------------------------------------
    async def create_card(self, card_json: str) -> str:
        """``POST /open-apis/cardkit/v1/cards``: a card entity from JSON 2.0 card JSON; returns ``card_id``."""
        body = CreateCardRequestBody.builder().type("card_json").data(card_json).build()
        request = CreateCardRequest.builder().request_body(body).build()
        response = await self.call(self.client.cardkit.v1.card.acreate, lambda: request)
        return str(response.data.card_id)

    async def stream_text(self, card_id: str, element_id: str, content: str, sequence: int) -> None:
        """``PUT …/cards/:card_id/elements/:element_id/content``: the element's whole new text.

        Feishu types out what extends the previous text and replaces the rest at once. ``sequence`` must
        be larger than that of any earlier call on this card.
        """
        body = ContentCardElementRequestBody.builder().content(content).sequence(sequence).build()
        request = (
            ContentCardElementRequest.builder()
            .card_id(card_id)
            .element_id(element_id)
            .request_body(body)
            .build()
        )
        async with self.card_rate.slot(card_id):
            await self.call(self.client.cardkit.v1.card_element.acontent, lambda: request)

    async def card_settings(self, card_id: str, settings: str, sequence: int) -> None:
        """``PATCH …/cards/:card_id/settings``: change the card's ``config`` (e.g. end streaming mode)."""
        body = SettingsCardRequestBody.builder().settings(settings).sequence(sequence).build()
        request = SettingsCardRequest.builder().card_id(card_id).request_body(body).build()
        async with self.card_rate.slot(card_id):
            await self.call(self.client.cardkit.v1.card.asettings, lambda: request)

    async def delete_element(self, card_id: str, element_id: str, sequence: int) -> None:
        """``DELETE …/cards/:card_id/elements/:element_id``: take one component out of a card entity
        (Feishu's own example: the "stop generating" button once the answer is complete)."""
        body = DeleteCardElementRequestBody.builder().sequence(sequence).build()
        request = (
            DeleteCardElementRequest.builder()
            .card_id(card_id)
            .element_id(element_id)
            .request_body(body)
            .build()
        )
        async with self.card_rate.slot(card_id):
            await self.call(self.client.cardkit.v1.card_element.adelete, lambda: request)

    async def react(self, message_id: str, emoji_type: str) -> None:
        body = (
            CreateMessageReactionRequestBody.builder()
            .reaction_type(Emoji.builder().emoji_type(emoji_type).build())
            .build()
        )
        request = CreateMessageReactionRequest.builder().message_id(message_id).request_body(body).build()
        await self.call(self.client.im.v1.message_reaction.acreate, lambda: request)

    async def download(self, message_id: str, file_key: str, kind: str) -> bytes:
        """A message's image/file bytes. The SDK buffers the whole body; the caller enforces the size cap."""
        request = (
            GetMessageResourceRequest.builder().message_id(message_id).file_key(file_key).type(kind).build()
        )
        response = await self.call(self.client.im.v1.message_resource.aget, lambda: request, binary=True)
        if response.file is None:
            raise BadRequest(f"feishu returned no content for resource {file_key}")
        return bytes(response.file.getvalue())

    async def upload(self, path: Path) -> tuple[str, str]:
        """Upload a local file; return (msg_type, content JSON) for the message that shows it."""
        data = await asyncio.to_thread(path.read_bytes)

        def stream() -> io.BytesIO:
            buffer = io.BytesIO(data)
            buffer.name = path.name  # httpx uses it as the multipart file name
            return buffer

        if is_image(path):

            def make_image() -> CreateImageRequest:
                body = CreateImageRequestBody.builder().image_type("message").image(stream()).build()
                return CreateImageRequest.builder().request_body(body).build()

            response = await self.call(self.client.im.v1.image.acreate, make_image)
            return "image", json.dumps({"image_key": response.data.image_key})

        def make_file() -> CreateFileRequest:
            body = CreateFileRequestBody.builder().file_type(_file_type(path)).file_name(path.name)
            return CreateFileRequest.builder().request_body(body.file(stream()).build()).build()

        response = await self.call(self.client.im.v1.file.acreate, make_file)
        return "file", json.dumps({"file_key": response.data.file_key})
