"""``switchboard admin ...``: the operator console from a shell, over the running service's own REST API.

Why over HTTP and not the database, like ``inbox`` and ``webhooks``: stopping a turn and deciding an
approval act on state that lives in the serving process (its lanes, its approval desk), and one client of
``/api/admin`` for every console action keeps the CLI, the page and scripts doing exactly the same thing
(same checks, same audit lines).

Where and as whom: ``--url`` (default: this machine's address of ``server.host``/``server.port``) and,
in ``auth.mode: jwt``, ``--token`` or ``$SWITCHBOARD_TOKEN``; without either, a five-minute admin token
for ``--user`` (default ``cli``) is signed with ``auth.jwt_secret`` from the config — whoever can read
the config is its operator already. The audit lines name that user.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from config.schema import Settings, local_public_url

CLI_TOKEN_SECONDS = 300
EXIT_FAILED = 1
TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Listing:
    """``admin <path>``: one GET list, printed one item a line with these fields (``--json``: all)."""

    path: str
    help: str
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Action:
    """``admin <name> ID...``: one POST; ``args`` fill the path's ``{…}`` in order."""

    name: str
    help: str
    path: str
    args: tuple[str, ...]


LISTINGS = (
    Listing("channels", "channels and their state", ("name", "state", "detail", "intake")),
    Listing("turns", "messages being answered or waiting", ("id", "state", "channel", "sender", "text")),
    Listing(
        "dead-letters", "failed and dead-lettered messages", ("id", "status", "attempts", "error", "text")
    ),
    Listing("deliveries", "GitHub webhook deliveries", ("id", "event", "status", "attempts", "detail")),
    Listing("approvals", "commands waiting for approval", ("id", "channel", "sender", "command")),
    Listing("schedules", "schedules that will still run", ("id", "owner", "when", "what")),
    Listing(
        "usage",
        "tokens and cost per person",
        ("owner", "input_tokens", "output_tokens", "turns", "models", "cost_today", "cost_month", "currency"),
    ),
    Listing("people", "signed-in people and their connections", ("id", "connections")),
)
ACTIONS = (
    Action("stop", "stop a running turn", "turns/{entry_id}/stop", ("entry_id",)),
    Action(
        "retry", "run a failed or dead-lettered message again", "dead-letters/{entry_id}/retry", ("entry_id",)
    ),
    Action(
        "retry-delivery",
        "run a failed GitHub delivery again",
        "deliveries/{delivery_id}/retry",
        ("delivery_id",),
    ),
    Action("approve", "approve a waiting command", "approvals/{approval_id}/approve", ("approval_id",)),
    Action("deny", "deny a waiting command", "approvals/{approval_id}/deny", ("approval_id",)),
    Action("cancel-schedule", "cancel a schedule", "schedules/{schedule_id}/cancel", ("schedule_id",)),
    Action(
        "unlink",
        "unlink one of a person's connections",
        "people/{person}/connections/{connection_id}/unlink",
        ("person", "connection_id"),
    ),
)


class AdminError(Exception):
    """The request could not be made or was refused; the message says why, for the operator."""


def base_url(settings: Settings, given: str | None) -> str:
    return (given or local_public_url(settings.server.host, settings.server.port)).rstrip("/")


def bearer(settings: Settings, token: str | None, user: str) -> dict[str, str]:
    """The Authorization header: the given token, else (jwt) a short admin token signed here."""
    if settings.auth.mode != "jwt":
        return {}
    if not token:
        if not settings.auth.jwt_secret:
            raise AdminError("auth.mode is jwt but auth.jwt_secret is not set: pass --token (an admin token)")
        from connections.auth import mint_token

        token = mint_token(settings.auth.jwt_secret, user, CLI_TOKEN_SECONDS, admin=True)
    return {"Authorization": f"Bearer {token}"}


def call(method: str, url: str, headers: dict[str, str], body: dict[str, Any] | None = None) -> Any:
    import httpx

    try:
        response = httpx.request(method, url, headers=headers, json=body, timeout=TIMEOUT_SECONDS)
    except httpx.TransportError as exc:
        raise AdminError(f"no service answers at {url} ({exc}); is `switchboard serve` running?") from None
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.is_error:
        detail = payload.get("detail") if isinstance(payload, dict) else None
        raise AdminError(f"{response.status_code}: {detail or response.reason_phrase}")
    return payload


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return (
            ", ".join(
                f"{v['provider']}:{v.get('external_name') or v['external_id']} ({v['id']})"
                if isinstance(v, dict)
                else str(v)
                for v in value
            )
            or "-"
        )
    return "-" if value is None or value == "" else str(value).replace("\n", " ")


def _run(args: argparse.Namespace, load_or_exit: Callable[[str | None], Settings]) -> int:
    settings = load_or_exit(args.config)
    try:
        headers = bearer(settings, args.token or os.environ.get("SWITCHBOARD_TOKEN"), args.user)
        root = base_url(settings, args.url) + "/api/admin/"
        listing: Listing | None = args.listing
        if listing is not None:
            items = call("GET", root + listing.path, headers)
            if args.json:
                print(json.dumps(items, indent=2))
            elif not items:
                print(f"no {listing.path}")
            for item in items if not args.json else []:
                print("  ".join(_shown(item.get(name)) for name in listing.fields))
            return 0
        action: Action = args.action
        path = action.path
        for name in action.args:
            path = path.replace("{" + name + "}", quote(getattr(args, name), safe=""))
        body = {"session": True} if getattr(args, "session", False) else None
        done = call("POST", root + path, headers, body)
        print(f"{done['id']}: {done['result']}")
        return 0
    except AdminError as exc:
        print(f"switchboard admin: {exc}", file=sys.stderr)
        return EXIT_FAILED


def register(subparsers: Any, load_or_exit: Callable[[str | None], Settings]) -> None:
    parser = subparsers.add_parser(
        "admin", help="the operator console from a shell (over the running service)"
    )
    sub = parser.add_subparsers(dest="admin_command", required=True)

    def common(command: argparse.ArgumentParser) -> None:
        command.add_argument("--url", help="the service's address (default: server.host and server.port)")
        command.add_argument(
            "--token", help="an admin token (default: $SWITCHBOARD_TOKEN, else one signed here)"
        )
        command.add_argument("--user", default="cli", help="who the audit log names for a token signed here")
        command.set_defaults(func=lambda args: _run(args, load_or_exit))

    for listing in LISTINGS:
        command = sub.add_parser(listing.path, help=listing.help)
        common(command)
        command.add_argument("--json", action="store_true", help="print the API's JSON as it is")
        command.set_defaults(listing=listing, action=None)
    for action in ACTIONS:
        command = sub.add_parser(action.name, help=action.help)
        common(command)
        for name in action.args:
            command.add_argument(name)
        if action.name == "approve":
            command.add_argument(
                "--session", action="store_true", help="also allow the command's patterns until /new"
            )
        command.set_defaults(listing=None, action=action)
