"""``/chat`` and ``/api/chat/...``: a signed-in person's conversations with the bot, in a browser.

Sign-in is the connect page's: :data:`connections.api.CurrentUser` (``auth.mode: jwt``: a bearer token
whose ``sub`` is the user; ``none``: the one local person, ``Host`` checked). Every route looks only in
the caller's own folder (channels/web/store.py), so another person's conversation or file id answers
404, exactly like one that never existed.

A message is answered ``202`` only after the inbox stored it (:meth:`WebChannel.submit`); the answer
arrives on ``GET .../events`` (``text/event-stream``: a snapshot of the conversation, then every change),
which the page reads with ``fetch`` because ``EventSource`` cannot send the bearer header.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, HTTPException, Request, Response, UploadFile, status
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, Field

from bot.service import Service
from bot.webchat import page
from channels.errors import Backpressure
from channels.web.channel import WebChannel
from channels.web.store import Entry, UnknownId
from connections.api import CurrentUser

log = logging.getLogger(__name__)

CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
MAX_FILES = 10
#: A comment line on an idle stream: proxies and the browser keep the connection open.
HEARTBEAT_SECONDS = 15.0


class ErrorOut(BaseModel):
    detail: str


class ConversationOut(BaseModel):
    id: str
    title: str = Field(description="the first message, cut to 80 characters")
    updated_at: float = Field(description="seconds since the epoch")


class ActionOut(BaseModel):
    command: str = Field(description="what pressing it sends (as pressed=<ref> with this text)")
    label: str
    style: str | None = None


class FileOut(BaseModel):
    name: str
    id: str | None = Field(None, description="GET /api/chat/files/{id} downloads it (files from the bot)")


class EntryOut(BaseModel):
    ref: str
    role: str = Field(description="user or assistant")
    text: str
    actions: list[ActionOut]
    files: list[FileOut]
    live: bool = Field(description="a reply still being written (it shows a Stop button)")
    at: float


class ConversationDetailOut(ConversationOut):
    entries: list[EntryOut]


class AcceptedOut(BaseModel):
    id: str = Field(description="the message's client id")
    accepted: bool = Field(description="false: this client id was stored before (a retry), nothing new")


AUTH_ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorOut, "description": "auth.mode none: the Host header names another server"},
    401: {"model": ErrorOut, "description": "not signed in"},
    404: {"model": ErrorOut, "description": "the web chat is off, or no such conversation of the caller's"},
}


def _channel(request: Request) -> WebChannel:
    service: Service = request.state.webchat_service
    channel = service.channels.get(WebChannel.provider)
    if not isinstance(channel, WebChannel):
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail="the web chat is not enabled on this server (an operator sets channels.web.enabled: true)",
        )
    return channel


Chat = Annotated[WebChannel, Depends(_channel)]


def _entry_out(entry: Entry) -> EntryOut:
    return EntryOut.model_validate(entry.to_json())


def _not_found(exc: UnknownId) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc))


def build_router(service: Service) -> APIRouter:
    def bind(request: Request) -> None:
        request.state.webchat_service = service
        request.state.connections_api = service.connections.rest_api()  # the sign-in /connect uses

    router = APIRouter(dependencies=[Depends(bind)])
    page.add_routes(router, service.settings.auth.mode)

    @router.get(
        "/api/chat/conversations",
        response_model=list[ConversationOut],
        tags=["web chat"],
        summary="The caller's web conversations, most recent first",
        responses=AUTH_ERRORS,
    )
    async def list_conversations(chat: Chat, user: CurrentUser) -> list[ConversationOut]:
        infos = await asyncio.to_thread(chat.store.conversations, user)
        return [ConversationOut(id=c.id, title=c.title, updated_at=c.updated_at) for c in infos]

    @router.post(
        "/api/chat/conversations",
        response_model=ConversationOut,
        status_code=status.HTTP_201_CREATED,
        tags=["web chat"],
        summary="Start a new conversation",
        responses=AUTH_ERRORS,
    )
    async def create_conversation(chat: Chat, user: CurrentUser) -> ConversationOut:
        conversation = await chat.create_conversation(user)
        return ConversationOut(id=conversation, title="New conversation", updated_at=0.0)

    @router.get(
        "/api/chat/conversations/{conversation}",
        response_model=ConversationDetailOut,
        tags=["web chat"],
        summary="A conversation as the page shows it (a reply being written included)",
        responses=AUTH_ERRORS,
    )
    async def get_conversation(conversation: str, chat: Chat, user: CurrentUser) -> ConversationDetailOut:
        try:
            entries = await chat.entries(user, conversation)
        except UnknownId as exc:
            raise _not_found(exc) from None
        title = next((e.text for e in entries if e.role == "user" and e.text), "New conversation")
        return ConversationDetailOut(
            id=conversation,
            title=title[:80],
            updated_at=max((e.at for e in entries), default=0.0),
            entries=[_entry_out(e) for e in entries],
        )

    @router.post(
        "/api/chat/conversations/{conversation}/messages",
        response_model=AcceptedOut,
        status_code=status.HTTP_202_ACCEPTED,
        tags=["web chat"],
        summary="Send a message (stored in the inbox before this answers); the reply streams on /events",
        responses={
            **AUTH_ERRORS,
            413: {"model": ErrorOut, "description": "a file over channels.web.max_file_bytes"},
            422: {"model": ErrorOut, "description": "empty, too long, or a malformed client id"},
            503: {"model": ErrorOut, "description": "the service cannot take more right now; retry"},
        },
    )
    async def send_message(
        conversation: str,
        chat: Chat,
        user: CurrentUser,
        client_id: Annotated[
            str, Form(description="8-64 of [A-Za-z0-9_-], new per message; a retry reuses it")
        ],
        text: Annotated[str, Form(description="what the person wrote (or a pressed button's command)")] = "",
        pressed: Annotated[
            str | None, Form(description="the ref of the reply whose button was pressed")
        ] = None,
        files: Annotated[list[UploadFile] | None, File(description="attachments")] = None,
    ) -> AcceptedOut:
        if not CLIENT_ID.match(client_id):
            raise HTTPException(422, detail="client_id must be 8-64 letters, digits, '_' or '-'")
        limit = chat.config.max_message_chars
        if len(text) > limit:
            raise HTTPException(422, detail=f"the message is {len(text)} characters; the limit is {limit}")
        uploads = files or []
        if not text.strip() and not uploads:
            raise HTTPException(422, detail="the message is empty: write something or attach a file")
        if len(uploads) > MAX_FILES:
            raise HTTPException(422, detail=f"at most {MAX_FILES} files per message")
        attached: list[tuple[str, bytes]] = []
        max_bytes = chat.config.max_file_bytes
        for upload in uploads:
            data = await upload.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise HTTPException(
                    413,
                    detail=f"{upload.filename} is larger than {max_bytes} bytes (channels.web.max_file_bytes)",
                )
            attached.append((upload.filename or "file", data))
        try:
            accepted = await chat.submit(
                user, conversation, text, client_id=client_id, files=attached, pressed=pressed or None
            )
        except UnknownId as exc:
            raise _not_found(exc) from None
        except Backpressure as exc:
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc) or "busy", headers={"Retry-After": "2"}
            ) from None
        return AcceptedOut(id=client_id, accepted=accepted)

    @router.get(
        "/api/chat/conversations/{conversation}/events",
        tags=["web chat"],
        summary="Server-sent events: a snapshot of the conversation, then every new or changed message",
        response_class=StreamingResponse,
        responses={**AUTH_ERRORS, 200: {"content": {"text/event-stream": {}}}},
    )
    async def events(conversation: str, chat: Chat, user: CurrentUser) -> StreamingResponse:
        if not await asyncio.to_thread(chat.store.exists, user, conversation):
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail="no such conversation")
        return StreamingResponse(
            _sse(chat, user, conversation),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @router.get(
        "/api/chat/files/{file_id}",
        tags=["web chat"],
        summary="Download a file the bot sent the caller",
        response_class=FileResponse,
        responses=AUTH_ERRORS,
    )
    async def download(file_id: str, chat: Chat, user: CurrentUser) -> Response:
        try:
            path = await asyncio.to_thread(chat.store.output, user, file_id)
        except UnknownId as exc:
            raise _not_found(exc) from None
        return FileResponse(
            path,
            filename=path.name,
            media_type="application/octet-stream",
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"},
        )

    return router


async def _sse(chat: WebChannel, user: str, conversation: str) -> AsyncIterator[str]:
    """The conversation's events as SSE, with a comment line whenever it has been quiet a while."""
    stream = chat.watch(user, conversation)
    pending: asyncio.Future[dict[str, Any]] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({pending}, timeout=HEARTBEAT_SECONDS)
            if not done:
                yield ": keep-alive\n\n"
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.wait({pending})
        await stream.aclose()
