"""``/api/admin/...``: what an operator sees and does — channels, turns (stop), dead letters (retry),
GitHub deliveries (retry), approvals (decide), schedules (cancel), usage, people (unlink a connection).

Every route requires an admin caller (:func:`get_admin`, on top of the sign-in every page shares,
:func:`connections.web.authenticate`): in ``auth.mode: jwt`` a token minted with ``switchboard token
create --admin``; with ``auth.mode: none`` the one local person (loopback only, ``Host`` checked), who
runs the service anyway. Anybody else gets 403, signed-out callers 401.

Turns are read from the durable inbox (a pending entry is a message being answered or waiting its turn)
and the manager's public :meth:`~bot.manager.ChannelManager.lane_state`; a stop goes through
:meth:`~bot.manager.ChannelManager.stop_turn` on behalf of the person who asked, so it behaves exactly like
their own Stop button (including on another instance of a cluster). Responses carry message previews,
never the configuration, tokens or secrets: free text passes the service's secret masker too, since an
error message can quote what a library was given.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Request, Response, status

from bot.console import page
from bot.console.models import (
    ActionOut,
    ApprovalOut,
    ChannelOut,
    DeadLetterOut,
    DecisionIn,
    DeliveryOut,
    PersonOut,
    ScheduleOut,
    TurnOut,
    UsageOut,
)
from bot.console.usage import usage_by_owner
from bot.console.views import LIST_LIMIT, Console, thread_of
from bot.inbox import PENDING
from bot.manager import StopResult
from bot.service import Service
from bot.spend.keeper import currency_of
from channels.types import Sender
from connections.auth import Caller
from connections.web import AUTH_ERRORS as SIGN_IN_ERRORS
from connections.web import ErrorOut, authenticate

audit = logging.getLogger("switchboard.audit")


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
    caller = authenticate(service.settings, request, authorization)
    if not caller.admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail=f"{caller.user} is not an operator: the console needs a token made with "
            "`switchboard token create --user NAME --admin`",
        )
    return caller


Admin = Annotated[Caller, Depends(get_admin)]

AUTH_ERRORS: dict[int | str, dict[str, object]] = {
    **SIGN_IN_ERRORS,
    403: {"model": ErrorOut, "description": "signed in, but not an admin"},
}
NOT_FOUND = 404
CONFLICT = 409


def _audit(admin: Caller, action: str, entry_id: str) -> None:
    """One audit line per console action: who did what to which entry (like approvals' lines)."""
    audit.info(
        "console: %s %s by %s",
        action,
        entry_id,
        admin.user,
        extra={"fields": {"console": action, "entry": entry_id, "by": admin.user}},
    )


def _errors(**codes: str) -> dict[int | str, dict[str, object]]:
    """The route's own error answers (``not_found=…``, ``conflict=…``) next to the sign-in ones."""
    numbers = {"not_found": NOT_FOUND, "conflict": CONFLICT}
    return {**AUTH_ERRORS, **{numbers[k]: {"model": ErrorOut, "description": v} for k, v in codes.items()}}


def build_router(service: Service) -> APIRouter:
    console = Console(service)

    def bind(request: Request) -> None:
        request.state.console_service = service

    router = APIRouter(dependencies=[Depends(bind)], tags=["admin"])

    def listing(path: str, model: Any, summary: str, read: Callable[[], Awaitable[list[Any]]]) -> None:
        """``GET /api/admin/<path>``: one list, admins only (the shape every list here has)."""

        async def handler(_admin: Admin) -> Any:
            return await read()

        handler.__name__ = "list_" + path.replace("-", "_")
        router.add_api_route(
            f"/api/admin/{path}",
            handler,
            methods=["GET"],
            response_model=list[model],
            summary=summary,
            responses=AUTH_ERRORS,
        )

    listing(
        "channels",
        ChannelOut,
        "Every configured channel and its state (what /health reports)",
        console.channels,
    )
    listing("turns", TurnOut, "Messages being answered or waiting their turn, oldest first", console.turns)
    listing(
        "dead-letters",
        DeadLetterOut,
        "Messages that failed (dead: failed bus.max_attempts times and set aside), newest first",
        console.dead_letters,
    )
    listing("deliveries", DeliveryOut, "GitHub webhook deliveries, newest first", console.deliveries)
    listing(
        "approvals",
        ApprovalOut,
        "Commands waiting for a person's approval in this process, oldest first",
        console.approvals,
    )
    listing("schedules", ScheduleOut, "Every schedule that will still run, soonest first", console.schedules)
    listing(
        "usage",
        UsageOut,
        "Tokens per person over their current conversations, most first, with what they cost today and this month",
        lambda: usage_by_owner(service.db.engine, LIST_LIMIT, currency_of(service.settings)),
    )
    listing("people", PersonOut, "Signed-in people and their active connections", console.people)

    @router.post(
        "/api/admin/turns/{entry_id}/stop",
        response_model=ActionOut,
        summary="Stop a running turn, as its own Stop button would",
        responses=_errors(
            not_found="no such inbox entry", conflict="the turn is not running (finished or still queued)"
        ),
    )
    async def stop_turn(entry_id: str, svc: ServiceDep, admin: Admin) -> ActionOut:
        entry = await svc.inbox.get(entry_id)
        if entry is None:
            raise HTTPException(NOT_FOUND, detail=f"no inbox entry {entry_id!r}")
        thread = await thread_of(svc, entry)
        if entry.status != PENDING or svc.manager is None or thread is None:
            raise HTTPException(CONFLICT, detail=f"{entry_id} is {entry.status}, not running")
        # On behalf of the person who asked: only this entry's turn is stopped, never a later one.
        result = await svc.manager.stop_turn(entry.message, thread, token=entry.id)
        if result is not StopResult.STOPPED:
            raise HTTPException(CONFLICT, detail=f"{entry_id} is not running (finished, or still queued)")
        _audit(admin, "stop", entry_id)
        return ActionOut(id=entry_id, result="stopping")

    @router.post(
        "/api/admin/dead-letters/{entry_id}/retry",
        response_model=ActionOut,
        status_code=status.HTTP_202_ACCEPTED,
        summary="Run a failed or dead-lettered message again (like `switchboard inbox retry`)",
        responses=_errors(not_found="no such inbox entry", conflict="the entry is not failed or dead"),
    )
    async def retry_dead_letter(entry_id: str, svc: ServiceDep, admin: Admin) -> ActionOut:
        if not await svc.inbox.request_retry(entry_id):
            entry = await svc.inbox.get(entry_id)
            if entry is None:
                raise HTTPException(NOT_FOUND, detail=f"no inbox entry {entry_id!r}")
            raise HTTPException(
                CONFLICT,
                detail=f"{entry_id} is {entry.status}; only failed or dead-lettered messages can be retried",
            )
        await svc.bus.resume_retries()  # now, rather than at the next poll
        _audit(admin, "retry", entry_id)
        return ActionOut(id=entry_id, result="queued for another run")

    @router.post(
        "/api/admin/deliveries/{delivery_id}/retry",
        response_model=ActionOut,
        status_code=status.HTTP_202_ACCEPTED,
        summary="Run a failed (or stuck) GitHub delivery again (like `switchboard webhooks retry`)",
        responses=_errors(not_found="no such delivery", conflict="the delivery is not failed or stuck"),
    )
    async def retry_delivery(delivery_id: str, svc: ServiceDep, admin: Admin) -> ActionOut:
        store = svc.github.store
        if not await store.request_retry(delivery_id):
            delivery = await store.get(delivery_id)
            if delivery is None:
                raise HTTPException(NOT_FOUND, detail=f"no delivery {delivery_id!r}")
            raise HTTPException(
                CONFLICT,
                detail=f"{delivery_id} is {delivery.status}; only failed or stuck deliveries can be retried",
            )
        _audit(admin, "retry delivery", delivery_id)
        return ActionOut(
            id=delivery_id,
            result="queued: the service runs it within channels.github.retry_poll_seconds",
        )

    @router.post(
        "/api/admin/approvals/{approval_id}/{decision}",
        response_model=ActionOut,
        summary="Approve or deny a waiting command, as one of the channel's admins would",
        responses=_errors(
            not_found="no such approval waiting in this process",
            conflict="already decided, expired, or cannot be allowed so",
        ),
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
            raise HTTPException(NOT_FOUND, detail=f"no approval {approval_id!r} is waiting in this process")
        # The decision is made in the request's own conversation, by the operator as an admin: the chat
        # is told who decided ("ops (console)"), and the desk's audit line names them.
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
            raise HTTPException(CONFLICT, detail=console.mask(verdict.text))
        return ActionOut(id=asked.id, result=console.mask(verdict.text))

    @router.post(
        "/api/admin/schedules/{schedule_id}/cancel",
        response_model=ActionOut,
        summary="Cancel a schedule (like /schedule cancel ID in its chat)",
        responses=_errors(not_found="no such active schedule"),
    )
    async def cancel_schedule(schedule_id: str, svc: ServiceDep, admin: Admin) -> ActionOut:
        book = svc.schedules.book
        found = await book.store.find(schedule_id)
        if found is None or not await book.store.cancel(found.conversation, found.id, book.clock()):
            raise HTTPException(NOT_FOUND, detail=f"no active schedule {schedule_id!r}")
        _audit(admin, "cancel schedule", found.id)
        return ActionOut(id=found.id, result="cancelled")

    @router.post(
        "/api/admin/people/{person}/connections/{connection_id}/unlink",
        response_model=ActionOut,
        summary="Unlink one of a person's connections (the platform account becomes unbound)",
        responses=_errors(not_found="no such active connection of that person"),
    )
    async def unlink_connection(person: str, connection_id: str, svc: ServiceDep, admin: Admin) -> ActionOut:
        revoked = await svc.connections.store.revoke(person, connection_id)
        if revoked is None:
            raise HTTPException(NOT_FOUND, detail=f"{person} has no active connection {connection_id!r}")
        _audit(admin, "unlink", connection_id)
        return ActionOut(id=connection_id, result=f"unlinked {person}'s {revoked.provider} account")

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
        return page.ADMIN.render(svc.settings.auth.mode)

    page.ADMIN.add_asset_route(router)
    return router
