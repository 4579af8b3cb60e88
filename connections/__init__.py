"""Connections: people (users), one-time connect codes, and which platform account belongs to whom.

Public surface: :class:`ConnectionStore` (the repository), :class:`OwnerResolver` (platform identity →
owner, cached), :func:`connections.api.build_router` (REST API + ``/connect`` page), and the JWT helpers
in :mod:`connections.auth`. This package imports only ``config``; the bot wires it in
``bot/features/connections.py``.

The web and JWT modules are not imported here: FastAPI and PyJWT (with ``cryptography``) take seconds to
import on a busy machine, and ``switchboard chat`` or the manager need neither.
"""

from connections.identity import DEFAULT_USER, PlatformIdentity, ResolvedOwner
from connections.resolver import OwnerResolver
from connections.store import (
    BindResult,
    CodeRejected,
    Connection,
    ConnectionStore,
    IssuedCode,
    TooManyPendingCodes,
)
from connections.tables import metadata

__all__ = [
    "DEFAULT_USER",
    "BindResult",
    "CodeRejected",
    "Connection",
    "ConnectionStore",
    "IssuedCode",
    "OwnerResolver",
    "PlatformIdentity",
    "ResolvedOwner",
    "TooManyPendingCodes",
    "metadata",
]
