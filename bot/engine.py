"""What a store needs of the database: its SQLAlchemy engine, typed without importing :mod:`bot.db`.

``Database.create_schema`` runs the upgrade steps (:mod:`bot.migrations`), and those create the tables of
stores such as approvals and pairing for a database older than them. Were those stores to import
``bot.db`` for its ``Database`` type, ``db → migrations → approvals → db`` would be an import circle;
they take anything with an ``engine`` instead, which a ``Database`` is.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine


class HasEngine(Protocol):
    """The database as a store sees it (a :class:`bot.db.Database`)."""

    @property
    def engine(self) -> AsyncEngine: ...
