"""``switchboard token create --user NAME [--ttl SECONDS] [--admin]``: mint an API token for a person.

The token is an HS256 JWT signed with ``auth.jwt_secret`` (``sub`` = the user id, ``exp`` = now + ttl;
``--admin`` adds ``"admin": true``, which the operator console at ``/admin`` requires).
It goes to stdout only, so ``TOKEN=$(switchboard token create --user alice)`` works.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

MIN_SECRET_LENGTH = 16


def register(subparsers: Any, load_or_exit: Callable[[str | None], Any]) -> None:
    token = subparsers.add_parser("token", help="mint API tokens for auth.mode: jwt")
    actions = token.add_subparsers(dest="token_command", required=True)
    create = actions.add_parser("create", help="print a signed token for a user")
    create.add_argument("--config", help="path to config.yaml")
    create.add_argument("--user", required=True, help="the user id (the token's sub)")
    create.add_argument(
        "--ttl",
        type=int,
        default=None,  # connections.identity's default, read when a token is made: importing
        # ``connections`` here would load SQLAlchemy for every command, `serve` included (0.4 s)
        help="lifetime in seconds (default 30 days)",
    )
    create.add_argument(
        "--admin",
        action="store_true",
        help="let the token use the operator console (/admin and /api/admin/...)",
    )
    create.set_defaults(func=lambda args: create_token(args, load_or_exit))


def create_token(args: argparse.Namespace, load_or_exit: Callable[[str | None], Any]) -> int:
    from connections.auth import mint_token  # PyJWT + cryptography: only when a token is made
    from connections.identity import DEFAULT_TOKEN_TTL_SECONDS, InvalidUserId, validate_user_id

    settings = load_or_exit(args.config)
    try:
        validate_user_id(args.user)
    except InvalidUserId as exc:
        print(f"switchboard token: --user: {exc}", file=sys.stderr)
        return 2
    ttl = DEFAULT_TOKEN_TTL_SECONDS if args.ttl is None else args.ttl
    if ttl <= 0:
        print("switchboard token: --ttl must be a positive number of seconds", file=sys.stderr)
        return 2
    secret = settings.auth.jwt_secret or ""
    if len(secret) < MIN_SECRET_LENGTH:
        print(
            "switchboard token: auth.jwt_secret is not set or shorter than 16 characters; "
            "set it (e.g. jwt_secret: $SWITCHBOARD_JWT_SECRET) before minting tokens",
            file=sys.stderr,
        )
        return 2
    if settings.auth.mode != "jwt":
        print(
            "switchboard token: note: auth.mode is not 'jwt', so the server does not check tokens yet",
            file=sys.stderr,
        )
    print(mint_token(secret, args.user, ttl, admin=args.admin))
    return 0
