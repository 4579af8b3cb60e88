"""The tables this package owns, on its own ``MetaData`` (the service creates them at start-up).

Timestamps are epoch seconds (``Float``) like the rest of the service, so SQLite and PostgreSQL compare
them the same way and the application clock is the only clock involved.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, MetaData, String, Table, text

metadata = MetaData()

users_table = Table(
    "users",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("created_at", Float, nullable=False),
    Column("last_seen_at", Float, nullable=False),
)

connect_codes_table = Table(
    "connect_codes",
    metadata,
    # Only the SHA-256 of the code is stored: a leaked database cannot be replayed into bindings.
    Column("code_hash", String(64), primary_key=True),
    Column("owner", String(128), ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("used_at", Float),
    Column("used_by", String(400)),
    Index("ix_connect_codes_owner_provider", "owner", "provider"),
)

ACTIVE = "active"
REVOKED = "revoked"

connections_table = Table(
    "connections",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("owner", String(128), ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("workspace", String(200), nullable=False),
    Column("external_id", String(200), nullable=False),
    Column("external_name", String(200)),
    Column("status", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("revoked_at", Float),
    Index("ix_connections_owner", "owner"),
    # One ACTIVE owner per platform identity; revoked rows are history and may repeat.
    Index(
        "uq_connections_active_identity",
        "provider",
        "workspace",
        "external_id",
        unique=True,
        sqlite_where=text("status = 'active'"),
        postgresql_where=text("status = 'active'"),
    ),
)
