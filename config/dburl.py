"""``database.url`` mistakes, each answered in one line that spells out the form that works.

The service speaks to SQLite through aiosqlite and to PostgreSQL through asyncpg, both via SQLAlchemy's
async engine. The URLs people paste from elsewhere (``postgresql://`` from ``psql``, ``sqlite:///`` from
a synchronous app, ``postgres://`` from a PaaS) otherwise fail deep inside SQLAlchemy with a driver
error that does not say what to write instead; this check runs while the config is validated, so
``serve``, ``doctor`` and ``config check`` all answer the same way before anything connects.
"""

from __future__ import annotations

from config.secrets import MASK, url_password

SQLITE = "sqlite+aiosqlite"
POSTGRES = "postgresql+asyncpg"
FORMS = (
    f"{SQLITE}:///relative/path.db, {SQLITE}:////absolute/path.db or "
    f"{POSTGRES}://USER:PASSWORD@HOST:5432/DATABASE"
)
#: Other spellings of the two databases we support: the answer keeps the rest of the URL as it is.
_POSTGRES_SCHEMES = frozenset(
    {
        "postgresql",
        "postgres",
        "postgresql+psycopg",
        "postgresql+psycopg2",
        "postgresql+pg8000",
        "postgres+asyncpg",
        "pgsql",
    }
)
_SQLITE_SCHEMES = frozenset({"sqlite", "sqlite3", "sqlite+pysqlite", "sqlite+sqlite3", "aiosqlite"})


def _masked(text: str) -> str:
    """The URL as it may be shown: its password (if any) replaced, since this line reaches logs."""
    password = url_password(text)
    return text.replace(f":{password}@", f":{MASK}@") if password else text


def database_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` and the form to write instead; None when it is a form we run."""
    text = _masked(url.strip())
    scheme, sep, rest = text.partition("://")
    if not sep:
        return f"{text!r} is not a database URL; write {FORMS}"
    lowered = scheme.lower()
    if lowered == POSTGRES:
        return None
    if lowered == SQLITE:
        if rest and not rest.startswith("/"):
            # sqlite+aiosqlite://data/x.db reads "data" as a host name and opens x.db in the working dir.
            return (
                f"{SQLITE}://{rest} has two slashes, so {rest.split('/')[0]!r} would be read as a host; "
                f"write {SQLITE}:///{rest} (three slashes: a relative path; four: an absolute one)"
            )
        return None
    if lowered in _POSTGRES_SCHEMES:
        return f"{scheme}:// is not the asyncpg driver the service uses; write {POSTGRES}://{rest}"
    if lowered in _SQLITE_SCHEMES:
        return f"{scheme}:// is not the aiosqlite driver the service uses; write {SQLITE}://{rest}"
    return f"{scheme}:// is not a database the service supports; write {FORMS}"
