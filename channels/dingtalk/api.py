"""DingTalk's HTTP side: access token, AI cards, session webhooks and file downloads.

We call the OpenAPI ourselves (httpx, on the service's event loop) instead of through dingtalk-stream's
helpers because those use blocking ``requests`` and log-and-swallow every failure; the reply scheduler
needs each failure as a typed :mod:`channels.errors` value. Every HTTP outcome is classified by ONE
function, :func:`classify`, so the mapping from DingTalk's codes to our error tree lives in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx

from channels.errors import (
    BadRequest,
    ChannelError,
    EditFailed,
    FileTooLarge,
    Forbidden,
    NetworkError,
    RetryAfter,
)

log = logging.getLogger(__name__)

#: Business error codes DingTalk uses for "slow down" / "busy, try again": system busy (-1), the API rate
#: limits (90002 every organisation together, 90018 one app in one organisation, 90019 a third-party app),
#: and the robot send-rate limits (130101 "send too fast", 410100).
RATE_LIMIT_ERRCODES = frozenset({-1, 90002, 90018, 90019, 130101, 410100})
#: errcode 88 means "see sub_code"; these sub_codes are the rate limits, anything else (60011 "no
#: permission to call this API", …) is a refusal.
RATE_LIMIT_SUBCODES = frozenset({"90002", "90018", "90019"})
#: OpenAPI (v1.0) error ``code`` strings that mean throttling.
RATE_LIMIT_CODES = ("Throttling", "QpsLimit", "qpsLimit", "RateLimit")
#: Wait used when DingTalk rate-limits without saying for how long.
DEFAULT_RETRY_AFTER = 2.0
#: Refresh the access token this long before DingTalk says it expires (at most half its lifetime).
TOKEN_REFRESH_MARGIN = 300.0
HTTP_TIMEOUT = httpx.Timeout(20.0, connect=10.0)
#: Session webhooks are only ever posted to DingTalk's own hosts (plus the configured API host).
WEBHOOK_HOSTS = frozenset({"oapi.dingtalk.com", "api.dingtalk.com"})


def classify(
    status: int, body: Any, *, what: str, headers: httpx.Headers | None = None
) -> ChannelError | None:
    """Map one DingTalk HTTP answer to our error tree; ``None`` means success.

    DingTalk speaks two dialects: the v1.0 OpenAPI answers non-2xx with ``{"code", "message"}``; the
    session webhook and old ``oapi`` answer HTTP 200 with ``{"errcode", "errmsg"}``.
    """
    data = body if isinstance(body, dict) else {}
    errcode = data.get("errcode")
    code = str(data.get("code") or "")
    detail = str(data.get("errmsg") or data.get("message") or code or status)[:200]
    try:
        errcode_int = int(errcode) if errcode is not None else 0
    except (TypeError, ValueError):
        errcode_int = 0
    if 200 <= status < 300 and errcode_int == 0:
        return None
    sub_code = str(data.get("sub_code") or "")
    if sub_code:
        detail = f"{detail} (sub_code {sub_code})"[:200]
    throttled = errcode_int in RATE_LIMIT_ERRCODES or (errcode_int == 88 and sub_code in RATE_LIMIT_SUBCODES)
    if status == 429 or throttled or any(c in code for c in RATE_LIMIT_CODES):
        wait = DEFAULT_RETRY_AFTER
        raw = headers.get("Retry-After") if headers is not None else None
        if raw:
            with contextlib.suppress(ValueError):
                wait = float(raw)
        return RetryAfter(wait, f"DingTalk {what}: {detail}")
    if status in (401, 403) or errcode_int == 88:
        return Forbidden(f"DingTalk {what} refused ({status}, errcode {errcode_int or '-'}): {detail}")
    if status == 404:
        return BadRequest(f"DingTalk {what}: not found: {detail}")
    if status >= 500:
        return NetworkError(f"DingTalk {what} failed ({status}): {detail}")
    return BadRequest(f"DingTalk {what} rejected ({status}, errcode {errcode_int or '-'}): {detail}")


class DingTalkApi:
    """A small async client for the calls Switchboard needs. Owns the cached access token."""

    def __init__(
        self,
        base_url: str,
        client_id: str,
        client_secret: str,
        oapi_base_url: str = "https://oapi.dingtalk.com",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.oapi_base_url = oapi_base_url.rstrip("/")
        self.client_id = client_id
        self._secret = client_secret
        self._http: httpx.AsyncClient | None = None
        self._token: str | None = None
        self._token_valid_until = 0.0
        self._token_lock = asyncio.Lock()
        self.tokens_fetched = 0
        host = urlsplit(self.base_url).hostname or ""
        self.webhook_hosts = WEBHOOK_HOSTS | {host}

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            # Proxy variables are honoured, like the SDK's requests/websockets calls on the stream side.
            self._http = httpx.AsyncClient(timeout=HTTP_TIMEOUT)
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # --- transport -------------------------------------------------------------------------------
    async def _request(
        self,
        method: str,
        url: str,
        *,
        what: str,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        try:
            response = await self.http.request(method, url, json=json_body, headers=headers)
        except httpx.HTTPError as exc:
            raise NetworkError(f"DingTalk {what}: {type(exc).__name__}") from None
        try:
            body: Any = response.json()
        except (json.JSONDecodeError, ValueError):
            body = {}
        error = classify(response.status_code, body, what=what, headers=response.headers)
        if error is not None:
            if response.status_code == 401:
                self.invalidate_token()  # the next call fetches a fresh one
            raise error
        return body if isinstance(body, dict) else {}

    async def _openapi(self, method: str, path: str, body: dict[str, Any], *, what: str) -> dict[str, Any]:
        token = await self.access_token()
        return await self._request(
            method,
            self.base_url + path,
            what=what,
            json_body=body,
            headers={"x-acs-dingtalk-access-token": token},
        )

    # --- access token ----------------------------------------------------------------------------
    def invalidate_token(self) -> None:
        self._token, self._token_valid_until = None, 0.0

    async def access_token(self) -> str:
        """The app's access token, fetched once and refreshed shortly before it expires."""
        if self._token and time.monotonic() < self._token_valid_until:
            return self._token
        async with self._token_lock:
            if self._token and time.monotonic() < self._token_valid_until:
                return self._token
            body = await self._request(
                "POST",
                self.base_url + "/v1.0/oauth2/accessToken",
                what="access token",
                json_body={"appKey": self.client_id, "appSecret": self._secret},
            )
            token = body.get("accessToken")
            if not token:
                raise BadRequest("DingTalk access token: the answer had no accessToken")
            lifetime = float(body.get("expireIn") or 7200)
            self._token = str(token)
            self._token_valid_until = time.monotonic() + lifetime - min(TOKEN_REFRESH_MARGIN, lifetime / 2)
            self.tokens_fetched += 1
            return self._token

    # --- session webhook ---------------------------------------------------------------------------
    async def post_session(self, webhook: str, expires_ms: int | None, payload: dict[str, Any]) -> None:
        """Answer in the conversation through the message's session webhook (valid about 1.5 hours)."""
        if not webhook:
            raise Forbidden("DingTalk message has no session webhook to reply through")
        if urlsplit(webhook).hostname not in self.webhook_hosts:
            raise Forbidden("DingTalk session webhook points at an unexpected host; refusing to post")
        if expires_ms and time.time() * 1000 >= expires_ms:
            raise Forbidden("DingTalk session webhook expired; the conversation can no longer be answered")
        await self._request("POST", webhook, what="session webhook", json_body=payload)

    # --- AI cards ----------------------------------------------------------------------------------
    async def create_and_deliver_card(
        self, template_id: str, params: dict[str, str], target: dict[str, Any]
    ) -> str:
        """Create an AI card with ``params`` and deliver it to ``target``; returns its outTrackId.

        ``cardParamMap`` is a string-to-string map (the SDK sends its ``AICardStatus`` values as the
        strings "1"…"5"). ``callbackType`` STREAM is what lets the card take streaming updates later.
        Both calls answer HTTP 200 even when they did not work: create says so in ``success``, deliver
        per space in ``result[].success`` / ``errorMsg`` (the robot is not in the group, the user left…).
        A card that reached no space raises :class:`CardNotDelivered`, so the answer goes as markdown.
        """
        out_track_id = f"sb-{uuid.uuid4().hex}"
        created = await self._openapi(
            "POST",
            "/v1.0/card/instances",
            {
                "cardTemplateId": template_id,
                "outTrackId": out_track_id,
                "cardData": {"cardParamMap": params},
                "callbackType": "STREAM",
                "imGroupOpenSpaceModel": {"supportForward": True},
                "imRobotOpenSpaceModel": {"supportForward": True},
            },
            what="card create",
        )
        require_success(created, "card create")
        delivered = await self._openapi(
            "POST",
            "/v1.0/card/instances/deliver",
            {"outTrackId": out_track_id, "userIdType": 1, **target},
            what="card deliver",
        )
        failures = undelivered(delivered)
        if failures:
            raise CardNotDelivered(out_track_id, failures)
        return out_track_id

    async def update_card(self, out_track_id: str, params: dict[str, str]) -> None:
        """Set some of the card's variables (``PUT /v1.0/card/instances``), e.g. its ``flowStatus``.

        ``updateCardDataByKey`` keeps the variables not named here; without it DingTalk replaces the
        whole map and the streamed content would be wiped by a status change.
        """
        body = await self._openapi(
            "PUT",
            "/v1.0/card/instances",
            {
                "outTrackId": out_track_id,
                "cardData": {"cardParamMap": params},
                "cardUpdateOptions": {"updateCardDataByKey": True},
            },
            what="card update",
        )
        require_success(body, "card update")

    async def stream_card(
        self, out_track_id: str, key: str, text: str, *, finalize: bool, failed: bool = False
    ) -> None:
        """Replace the card's streamed variable (``isFull``); ``finalize`` ends its typing effect."""
        body = await self._openapi(
            "PUT",
            "/v1.0/card/streaming",
            {
                "outTrackId": out_track_id,
                "guid": uuid.uuid4().hex,
                "key": key,
                "content": text,
                "isFull": True,
                "isFinalize": finalize,
                "isError": failed,
            },
            what="card streaming",
        )
        require_success(body, "card streaming")

    # --- people -------------------------------------------------------------------------------------
    async def user_name(self, staff_id: str) -> str | None:
        """A user's name from DingTalk's "query user details" (``POST /topapi/v2/user/get``, oapi host,
        token in the query); needs the ``qyapi_get_member`` permission (else errcode 88 → Forbidden)."""
        token = await self.access_token()
        body = await self._request(
            "POST",
            f"{self.oapi_base_url}/topapi/v2/user/get?access_token={token}",
            what="user details",
            json_body={"userid": staff_id},
        )
        result = body.get("result")
        name = result.get("name") if isinstance(result, dict) else None
        return str(name) if name else None

    # --- outbound files --------------------------------------------------------------------------
    async def upload_file(self, name: str, data: bytes, media_type: str = "file") -> str:
        """Upload bytes as robot media (old ``oapi`` host, token in the query); returns the media id.

        ``media_type`` is the upload ``type`` (image/voice/video/file); DingTalk checks the file's
        extension and size against it (``channels.dingtalk.media`` picks one that fits).
        """
        token = await self.access_token()
        try:
            response = await self.http.post(
                self.oapi_base_url + "/media/upload",
                params={"access_token": token, "type": media_type},
                files={"media": (name, data, "application/octet-stream")},
            )
        except httpx.HTTPError as exc:
            raise NetworkError(f"DingTalk media upload: {type(exc).__name__}") from None
        try:
            body: Any = response.json()
        except ValueError:
            body = {}
        error = classify(response.status_code, body, what="media upload", headers=response.headers)
        if error is not None:
            raise error
        media_id = body.get("media_id") if isinstance(body, dict) else None
        if not media_id:
            raise BadRequest("DingTalk media upload: no media_id in the answer")
        return str(media_id)

    async def send_image_message(self, target: dict[str, Any], media_id: str) -> None:
        """Send an uploaded image as a picture (``sampleImageMsg``: ``photoURL`` takes a media id)."""
        await self.send_robot_message(target, "sampleImageMsg", {"photoURL": media_id})

    async def send_file_message(self, target: dict[str, Any], media_id: str, name: str) -> None:
        """Send an uploaded file as a robot message (``sampleFile``)."""
        suffix = name.rsplit(".", 1)[-1].lower() if "." in name else "file"
        await self.send_robot_message(
            target, "sampleFile", {"mediaId": media_id, "fileName": name, "fileType": suffix}
        )

    async def send_robot_message(self, target: dict[str, Any], msg_key: str, param: dict[str, Any]) -> None:
        """A robot message through the OpenAPI, to a one-to-one chat or a group.

        Used for files (the session webhook cannot carry them) and when a session webhook has expired.
        """
        body: dict[str, Any] = {
            "robotCode": target["robot_code"],
            "msgKey": msg_key,
            "msgParam": json.dumps(param, ensure_ascii=False),
        }
        if target["group"]:
            body["openConversationId"] = target["conversation_id"]
            await self._openapi("POST", "/v1.0/robot/groupMessages/send", body, what="group robot message")
            return
        body["userIds"] = [target["user_id"]]
        sent = await self._openapi("POST", "/v1.0/robot/oToMessages/batchSend", body, what="robot message")
        # HTTP 200 with the user in one of these lists means the message did not go to them.
        if sent.get("flowControlledStaffIdList"):
            raise RetryAfter(DEFAULT_RETRY_AFTER, "DingTalk robot message: the user is flow-controlled")
        if sent.get("invalidStaffIdList"):
            raise BadRequest("DingTalk robot message: the user id is not valid for this robot")

    def session_usable(self, webhook: str, expires_ms: int | None) -> bool:
        """Whether a session webhook can still be posted to (present and not past its expiry)."""
        return bool(webhook) and not (expires_ms and time.time() * 1000 >= expires_ms - 5_000)

    # --- files -------------------------------------------------------------------------------------
    async def download(self, download_code: str, robot_code: str, name: str, max_bytes: int) -> bytes:
        """Resolve a message's downloadCode to a URL and fetch it, stopping past ``max_bytes``."""
        body = await self._openapi(
            "POST",
            "/v1.0/robot/messageFiles/download",
            {"downloadCode": download_code, "robotCode": robot_code},
            what="file download",
        )
        url = body.get("downloadUrl")
        if not url:
            raise BadRequest("DingTalk file download: no downloadUrl in the answer")
        chunks: list[bytes] = []
        size = 0
        try:
            async with self.http.stream("GET", url) as response:
                if response.status_code >= 400:
                    raise classify(response.status_code, {}, what="file fetch") or BadRequest("file fetch")
                declared = response.headers.get("Content-Length")
                if declared and declared.isdigit() and int(declared) > max_bytes:
                    raise FileTooLarge(name, int(declared), max_bytes)
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise FileTooLarge(name, size, max_bytes)
                    chunks.append(chunk)
        except httpx.HTTPError as exc:
            raise NetworkError(f"DingTalk file fetch: {type(exc).__name__}") from None
        return b"".join(chunks)


class CardNotDelivered(EditFailed):
    """The card was created but DingTalk put it into no space: nobody can see it."""

    def __init__(self, out_track_id: str, failures: list[str]) -> None:
        super().__init__(f"AI card {out_track_id} was not delivered: {'; '.join(failures)}")
        self.out_track_id = out_track_id
        self.failures = failures


def require_success(body: dict[str, Any], what: str) -> None:
    """The card APIs answer HTTP 200 with ``success`` (and a boolean ``result`` for updates); false in
    either is a refusal we would otherwise never notice."""
    if body.get("success") is False or body.get("result") is False:
        raise BadRequest(f"DingTalk {what}: the answer says it did not succeed")


def undelivered(body: dict[str, Any]) -> list[str]:
    """What went wrong per space in a deliver answer (``result[]``; ``deliverResults[]`` in
    createAndDeliver's ``result``); empty when the card reached every space it was sent to."""
    if body.get("success") is False:
        return ["the deliver call says it did not succeed"]
    results = body.get("result")
    if isinstance(results, dict):  # createAndDeliver: {"outTrackId", "deliverResults": [...]}
        results = results.get("deliverResults")
    failures = []
    for item in results if isinstance(results, list) else []:
        if isinstance(item, dict) and item.get("success") is False:
            space = f"{item.get('spaceType') or '?'} {item.get('spaceId') or '?'}"
            failures.append(f"{space}: {str(item.get('errorMsg') or 'refused')[:200]}")
    return failures


def as_edit_failure(exc: ChannelError) -> ChannelError:
    """A card that cannot be created or updated is a broken card: the reply must fall back to markdown.

    Rate limits and network trouble stay what they are (the scheduler waits and retries those).
    """
    if isinstance(exc, RetryAfter | NetworkError | EditFailed):
        return exc
    return EditFailed(f"AI card unusable: {exc}")
