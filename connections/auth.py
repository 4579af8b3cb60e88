"""Who is calling the API: ``auth.mode: none`` (one person, user ``default``) or HS256 JWT bearer tokens.

Only HS256 is accepted (an attacker must not pick ``none`` or an asymmetric algorithm), ``exp`` and
``sub`` are required, and ``sub`` must be a valid user id (see :mod:`connections.identity`).

``auth.mode: none`` is for one machine: ``serve`` listens only on a loopback address then, and
:func:`check_host` refuses a request whose ``Host`` names another server. Without it, a web page the
person opens could re-point its own name at 127.0.0.1 (DNS rebinding) and use the API as ``default``
from their browser; the browser still sends the page's name as ``Host``, which gives it away.

PyJWT is imported by the functions that make or check a token, not by this module: it brings in
``cryptography`` (about 8 MiB of resident memory), which an ``auth.mode: none`` service never uses.
``serve`` imports it before it listens when ``auth.mode`` is ``jwt`` (``bot/cli.py``), so a missing
PyJWT still stops start-up and the first request does not pay the import.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from config.hosts import LOOPBACK_NAMES, host_name, is_loopback, url_host
from connections.identity import DEFAULT_TOKEN_TTL_SECONDS, DEFAULT_USER, InvalidUserId, validate_user_id

ALGORITHM = "HS256"


class AuthError(Exception):
    """The request is not authenticated; the message is safe to show the caller."""


class ForeignHost(Exception):
    """``auth.mode: none`` and the request was addressed to another server; safe to show the caller."""


def check_host(header: str | None, public_url: str) -> None:
    """Accept a ``Host`` of this machine's own: a loopback name or address (any port) or the host of
    ``server.public_url``. The port is not compared: a rebinding page has its own name, not ours, and a
    proxy on this machine may use a port of its own."""
    name = host_name(header or "")
    allowed = url_host(public_url)
    if name is not None and (is_loopback(name) or name == allowed):
        return
    names = ", ".join([*LOOPBACK_NAMES, *([allowed] if allowed and not is_loopback(allowed) else [])])
    shown = repr(header) if header else "missing"
    raise ForeignHost(
        f"the Host header ({shown}) is not this server's: with auth.mode none only {names} are "
        "accepted (server.public_url sets the last), so that no other web site can reach this API "
        "through your browser (DNS rebinding); use one of those names, or set auth.mode: jwt"
    )


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, and whether they may use the operator console (``/admin``)."""

    user: str
    admin: bool


def mint_token(
    secret: str, user: str, ttl_seconds: int = DEFAULT_TOKEN_TTL_SECONDS, *, admin: bool = False
) -> str:
    """An HS256 JWT for ``user``; ``admin`` adds the ``"admin": true`` claim the console asks for."""
    validate_user_id(user)
    if ttl_seconds <= 0:
        raise ValueError("the token lifetime must be positive")
    import jwt

    now = int(time.time())
    claims: dict[str, object] = {"sub": user, "iat": now, "exp": now + int(ttl_seconds)}
    if admin:
        claims["admin"] = True
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(secret: str, token: str) -> str:
    """The user id a valid token names; :class:`AuthError` says what is wrong otherwise."""
    return verify_caller(secret, token).user


def verify_caller(secret: str, token: str) -> Caller:
    """The user a valid token names and whether it carries ``"admin": true`` (only the JSON ``true``
    counts: a claim of ``"yes"`` or ``1`` is not an admin grant)."""
    import jwt

    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], options={"require": ["exp", "sub"]})
    except jwt.ExpiredSignatureError:
        raise AuthError("the token has expired; ask an operator for a new one") from None
    except jwt.MissingRequiredClaimError as exc:
        raise AuthError(f"the token has no '{exc.claim}' claim") from None
    except jwt.InvalidSignatureError:
        raise AuthError("the token's signature is not valid for this server") from None
    except jwt.InvalidTokenError:
        raise AuthError("the token is malformed or not an HS256 JWT") from None
    try:
        user = validate_user_id(claims["sub"])
    except InvalidUserId as exc:
        raise AuthError(f"the token's 'sub' is not a valid user id: {exc}") from None
    return Caller(user=user, admin=claims.get("admin") is True)


def user_from_header(mode: str, secret: str | None, authorization: str | None) -> str:
    """Authenticate one request from its ``Authorization`` header."""
    return caller_from_header(mode, secret, authorization).user


def caller_from_header(mode: str, secret: str | None, authorization: str | None) -> Caller:
    """Authenticate one request and say whether it may operate the service.

    ``auth.mode: none`` is one person on one machine (loopback only, ``Host`` checked): they run the
    service, so they are its operator too. In jwt mode only a token minted with ``--admin`` is.
    """
    if mode == "none":
        return Caller(user=DEFAULT_USER, admin=True)
    if not authorization:
        raise AuthError("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("the Authorization header must be 'Bearer <token>'")
    if not secret:
        raise AuthError("the server has no auth.jwt_secret configured")
    return verify_caller(secret, token.strip())
