"""``/api/admin/...``: what an operator sees and does — channels, turns (stop), dead letters (retry).

Every route requires an admin caller (:func:`connections.auth.caller_from_header`): in ``auth.mode:
jwt`` a token minted with ``switchboard token create --admin``; with ``auth.mode: none`` the one local
person (loopback only, ``Host`` checked), who runs the service anyway. Anybody else gets 403, signed-out
callers 401.

Turns are read from the durable inbox (a pending entry is a message being answered or waiting its turn)
and the manager's public :meth:`~bot.manager.ChannelManager.lane_state`; a stop goes through
:meth:`~bot.manager.ChannelManager.stop_turn` on behalf of the person who asked, so it behaves exactly like
their own Stop button (including on another instance of a cluster). Responses carry message previews,
never the configuration, tokens or secrets.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Request, Response, status
from pydantic import BaseModel, Field

from bot.console import page
from bot.inbox import DEAD, FAILED, PENDING, InboxEntry
from bot.manager import StopResult
from bot.service import Service
from channels.types import Sender
from connections.auth import AuthError, Caller, ForeignHost, caller_from_header, check_host

audit = logging.getLogger("switchboard.audit")

PREVIEW_CHARS = 200
LIST_LIMIT = 200


class ErrorOut(BaseModel):
    detail: str


class ChannelOut(BaseModel):
    name: str
    state: str = Field(description="as /health reports it: connected, receiving, error, …")
    detail: str | None = Field(None, description="why, when the state is not plain")
    intake: str | None = Field(None, description="whether messages reach this instance, and if not, why")


class TurnOut(BaseModel):
    id: str = Field(description="the inbox entry id; POST .../stop with it")
    channel: str
    chat: str
    sender: str = Field(description="the sender's display name, else their platform id")
    text: str = Field(description="the message, cut to 200 characters")
    state: Literal["running", "queued", "waiting"] = Field(
        description="running: being answered; queued: behind another turn of its thread; waiting: "
        "accepted, not yet handed to a thread (or running on another instance)"
    )
    age_seconds: float


class DeadLetterOut(BaseModel):
    id: str = Field(description="the inbox entry id; POST .../retry with it")
    channel: str
    chat: str
    sender: str
    text: str
    status: Literal["failed", "dead"]
    attempts: int
    error: str | None
    age_seconds: float


class ApprovalOut(BaseModel):
    id: str = Field(description="the approval id; POST .../approve or .../deny with it")
    channel: str
    chat: str
    sender: str = Field(description="who asked for the turn that wants to run the command")
    command: str = Field(description="the command as shown in the chat (secrets masked)")
    reason: str
    age_seconds: float


class ScheduleOut(BaseModel):
    id: str = Field(description="the schedule id; POST .../cancel with it")
    owner: str
    channel: str
    chat: str
    when: str = Field(description="as it was asked for, e.g. 'every weekday 09:00'")
    what: str = Field(description="the task it sends, cut to 200 characters")
    next_at: float = Field(description="next run, seconds since the epoch")


class DecisionIn(BaseModel):
    session: bool = Field(
        False, description="approve only: also allow the command's patterns for the rest of the conversation"
    )


class ActionOut(BaseModel):
    id: str
    result: str = Field(description="what happened, in words")


# --- dependencies -----------------------------------------------------------------------------------
def get_service(request: Request) -> Service:
    service: Service = request.state.console_service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]


def get_admin(
    service: ServiceDep,
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Caller:
    auth = service.settings.auth
    if auth.mode == "none":  # nobody signs in: the request must at least be addressed to this machine
        try:
            check_host(request.headers.get("host"), service.settings.server.public_url)
        except ForeignHost as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=str(exc)) from None
    try:
        caller = caller_from_header(auth.mode, auth.jwt_secret, authorization)
    except AuthError as exc:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}
        ) from None
    if not caller.admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail=f"{caller.user} is not an operator: the console needs a token made with "
            "`switchboard token create --user NAME --admin`",
        )
    return caller


Admin = Annotated[Caller, Depends(get_admin)]

AUTH_ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorOut, "description": "auth.mode none: the Host header names another server"},
    401: {"model": ErrorOut, "description": "not signed in"},
    403: {"model": ErrorOut, "description": "signed in, but not an admin"},
}


def _audit(admin: Caller, action: str, entry_id: str) -> None:
    """One audit line per console action: who did what to which entry (like approvals' lines)."""
    audit.info(
        "console: %s %s by %s",
        action,
        entry_id,
        admin.user,
        extra={"fields": {"console": action, "entry": entry_id, "by": admin.user}},
    )


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _sender(entry: InboxEntry) -> str:
    sender = entry.message.sender
    return sender.name or sender.id


async def _thread_of(service: Service, entry: InboxEntry) -> str | None:
    conversation = await service.threads.get(entry.message.conversation_key)
    return conversation.thread_id if conversation is not None else None


async def _turns(service: Service) -> list[TurnOut]:
    """Pending inbox entries, oldest first; per thread the oldest is running while the lane runs."""
    manager = service.manager
    now = time.time()
    seen_running: set[str] = set()
    out: list[TurnOut] = []
    for entry in await service.inbox.unfinished():
        if entry.status != PENDING:
            continue  # failed, waiting for its redelivery: listed with the dead letters
        thread = await _thread_of(service, entry)
        lane = manager.lane_state(thread) if manager is not None and thread is not None else "idle"
        state: Literal["running", "queued", "waiting"] = "waiting"
        if thread is not None and lane.startswith("running"):
            state = "queued" if thread in seen_running else "running"
            seen_running.add(thread)
        out.append(
            TurnOut(
                id=entry.id,
                channel=entry.message.provider,
                chat=entry.message.chat,
                sender=_sender(entry),
                text=_preview(entry.message.text),
                state=state,
                age_seconds=round(now - entry.created_at, 1),
            )
        )
    return out


def build_router(service: Service) -> APIRouter:
    def bind(request: Request) -> None:
        request.state.console_service = service

    router = APIRouter(dependencies=[Depends(bind)])

    @router.get(
        "/api/admin/channels",
        response_model=list[ChannelOut],
        tags=["admin"],
        summary="Every configured channel and its state (what /health reports)",
        responses=AUTH_ERRORS,
    )
    async def list_channels(svc: ServiceDep, _admin: Admin) -> list[ChannelOut]:
        out = []
        for name, channel in svc.channels.items():
            health = channel.health()
            detail, intake = health.get("detail"), health.get("intake")
            out.append(
                ChannelOut(
                    name=name,
                    state=str(health["state"]),
                    detail=str(detail) if detail else None,
                    intake=str(intake) if intake else None,
                )
            )
        out.extend(ChannelOut(name=n, state="error", detail=e) for n, e in svc.channel_errors.items())
        return out

    @router.get(
        "/api/admin/turns",
        response_model=list[TurnOut],
        tags=["admin"],
        summary="Messages being answered or waiting their turn, oldest first",
        responses=AUTH_ERRORS,
    )
    async def list_turns(svc: ServiceDep, _admin: Admin) -> list[TurnOut]:
        return await _turns(svc)

    @router.post(
        "/api/admin/turns/{entry_id}/stop",
        response_model=ActionOut,
        tags=["admin"],
        summary="Stop a running turn, as its own Stop button would",
        responses={
            **AUTH_ERRORS,
            404: {"model": ErrorOut, "description": "no such inbox entry"},
            409: {"model": ErrorOut, "description": "the turn is not running (finished or still queued)"},
        },
    )
    async def stop_turn(entry_id: str, svc: ServiceDep, admin: Admin) -> ActionOut:
        entry = await svc.inbox.get(entry_id)
        if entry is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no inbox entry {entry_id!r}")
        thread = await _thread_of(svc, entry)
        if entry.status != PENDING or svc.manager is None or thread is None:
            raise HTTPException(status.HTTP_409_CONFLICT, detail=f"{entry_id} is {entry.status}, not running")
        # On behalf of the person who asked: only this entry's turn is stopped, never a later one.
        result = await svc.manager.stop_turn(entry.message, thread, token=entry.id)
        if result is not StopResult.STOPPED:
            raise HTTPException(
                status.HTTP_409_CONFLICT, detail=f"{entry_id} is not running (finished, or still queued)"
            )
        _audit(admin, "stop", entry_id)
        return ActionOut(id=entry_id, result="stopping")

    @router.get(
        "/api/admin/dead-letters",
        response_model=list[DeadLetterOut],
        tags=["admin"],
        summary="Messages that failed (dead: failed bus.max_attempts times and set aside), newest first",
        responses=AUTH_ERRORS,
    )
    async def list_dead_letters(svc: ServiceDep, _admin: Admin) -> list[DeadLetterOut]:
        now = time.time()
        return [
            DeadLetterOut(
                id=e.id,
                channel=e.message.provider,
                chat=e.message.chat,
                sender=_sender(e),
                text=_preview(e.message.text),
                status="dead" if e.status == DEAD else "failed",
                attempts=e.attempts,
                error=e.error,
                age_seconds=round(now - e.created_at, 1),
            )
            for e in await svc.inbox.entries(failed_only=True, limit=LIST_LIMIT)
            if e.status in (FAILED, DEAD)
        ]

    @router.post(
        "/api/admin/dead-letters/{entry_id}/retry",
        response_model=ActionOut,
        status_code=status.HTTP_202_ACCEPTED,
        tags=["admin"],
        summary="Run a failed or dead-lettered message again (like `switchboard inbox retry`)",
        responses={
            **AUTH_ERRORS,
            404: {"model": ErrorOut, "description": "no such inbox entry"},
            409: {"model": ErrorOut, "description": "the entry is not failed or dead"},
        },
    )
    async def retry_dead_letter(entry_id: str, svc: ServiceDep, admin: Admin) -> ActionOut:
        if not await svc.inbox.request_retry(entry_id):
            entry = await svc.inbox.get(entry_id)
            if entry is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no inbox entry {entry_id!r}")
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                detail=f"{entry_id} is {entry.status}; only failed or dead-lettered messages can be retried",
            )
        await svc.bus.resume_retries()  # now, rather than at the next poll
        _audit(admin, "retry", entry_id)
        return ActionOut(id=entry_id, result="queued for another run")

    @router.get("/admin", include_in_schema=False)
    async def admin_page(
        svc: ServiceDep,
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
    ) -> Response:
        # A browser's first load carries no token (the page asks for it, jwt mode): the page is served
        # and its API calls are checked. A request that does bring credentials is checked right here,
        # so a non-admin's token gets 403 for the page too, not only for the API behind it.
        if authorization is not None or svc.settings.auth.mode == "none":
            get_admin(svc, request, authorization)
        return page.page(svc.settings.auth.mode)

    @router.get(
        "/api/admin/approvals",
        response_model=list[ApprovalOut],
        tags=["admin"],
        summary="Commands waiting for a person's approval in this process, oldest first",
        responses=AUTH_ERRORS,
    )
    async def list_approvals(svc: ServiceDep, _admin: Admin) -> list[ApprovalOut]:
        desk = svc.manager.approvals if svc.manager is not None else None
        if desk is None:
            return []
        now = time.time()
        return [
            ApprovalOut(
                id=a.id,
                channel=a.message.provider,
                chat=a.message.chat,
                sender=a.message.sender.name or a.message.sender.id,
                command=a.command,
                reason=a.reason,
                age_seconds=round(now - a.created_at, 1),
            )
            for a in await desk.pending()
        ]

    @router.post(
        "/api/admin/approvals/{approval_id}/{decision}",
        response_model=ActionOut,
        tags=["admin"],
        summary="Approve or deny a waiting command, as one of the channel's admins would",
        responses={
            **AUTH_ERRORS,
            404: {"model": ErrorOut, "description": "no such approval waiting in this process"},
            409: {"model": ErrorOut, "description": "already decided, expired, or cannot be allowed so"},
        },
    )
    async def decide_approval(
        approval_id: str,
        decision: Literal["approve", "deny"],
        svc: ServiceDep,
        admin: Admin,
        body: DecisionIn | None = None,
    ) -> ActionOut:
        desk = svc.manager.approvals if svc.manager is not None else None
        waiting = {a.id: a for a in await desk.pending()} if desk is not None else {}
        asked = waiting.get(approval_id.strip().upper())
        if desk is None or asked is None:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, detail=f"no approval {approval_id!r} is waiting in this process"
            )
        # The decision is made in the request's own conversation, by the operator as an admin: the chat
        # is told who decided ("ops (console)"), and the audit line names them.
        operator = replace(
            asked.message, sender=Sender(id=f"console:{admin.user}", name=f"{admin.user} (console)")
        )
        verdict = await desk.decide(
            asked.id,
            operator,
            approve=decision == "approve",
            admin=True,
            session=body is not None and body.session,
        )
        if not verdict.ok:
            raise HTTPException(status.HTTP_409_CONFLICT, detail=verdict.text)
        return ActionOut(id=asked.id, result=verdict.text)

    @router.get(
        "/api/admin/schedules",
        response_model=list[ScheduleOut],
        tags=["admin"],
        summary="Every schedule that will still run, soonest first",
        responses=AUTH_ERRORS,
    )
    async def list_schedules(svc: ServiceDep, _admin: Admin) -> list[ScheduleOut]:
        return [
            ScheduleOut(
                id=s.id,
                owner=s.owner,
                channel=s.message.provider,
                chat=s.message.chat,
                when=s.when,
                what=_preview(s.what),
                next_at=s.next_at,
            )
            for s in await svc.schedules.book.store.active(LIST_LIMIT)
            if s.next_at is not None
        ]

    @router.post(
        "/api/admin/schedules/{schedule_id}/cancel",
        response_model=ActionOut,
        tags=["admin"],
        summary="Cancel a schedule (like /schedule cancel ID in its chat)",
        responses={**AUTH_ERRORS, 404: {"model": ErrorOut, "description": "no such active schedule"}},
    )
    async def cancel_schedule(schedule_id: str, svc: ServiceDep, admin: Admin) -> ActionOut:
        book = svc.schedules.book
        found = await book.store.find(schedule_id)
        if found is None or not await book.store.cancel(found.conversation, found.id, book.clock()):
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no active schedule {schedule_id!r}")
        _audit(admin, "cancel schedule", found.id)
        return ActionOut(id=found.id, result="cancelled")

    page.add_asset_routes(router)
    return router
