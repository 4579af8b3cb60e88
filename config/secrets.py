"""Every secret the service knows, gathered in one place so logs, tool output and chat can mask them.

Sources: configured values under secret-looking keys (tokens, keys, passwords), passwords inside URLs
(``database.url``), and the service's own environment variables whose names look secret (a key exported
for ``$OPENAI_API_KEY`` substitution is a secret even where the config file never names it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel

# Names that look like credentials. Matched against the upper-cased variable or key name.
SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSW|PASSPHRASE|PWD$|CREDENTIAL|AUTH|COOKIE|SESSION|DSN|DATABASE_URL|DB_URL|_URI$|PRIVATE)"
)
# A few harmless names that contain a secret-looking fragment.
ALLOWED_NAMES = frozenset({"PWD", "OLDPWD", "PRIVATE_KEY_PATH", "AUTH_MODE", "MODE"})
# Values that carry credentials even under an innocent name (``scheme://user:pass@host``).
CREDENTIAL_URL = re.compile(r"^[a-z][a-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@", re.I)
#: Shorter values would mask ordinary words (``true``, ``none``) all over the text.
MIN_MASKED_LENGTH = 6


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return upper not in ALLOWED_NAMES and bool(SECRET_NAME.search(upper))


def url_password(value: str) -> str | None:
    """The password inside ``scheme://user:password@host/…``, if there is one."""
    if not CREDENTIAL_URL.match(value.strip()):
        return None
    try:
        password = urlsplit(value.strip()).password
    except ValueError:
        return None
    return unquote(password) if password else None


def _walk(value: Any, key: str, found: set[str]) -> None:
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, Mapping):
        for k, v in value.items():
            _walk(v, str(k), found)
    elif isinstance(value, list | tuple):
        for v in value:
            _walk(v, key, found)
    elif isinstance(value, str):
        password = url_password(value)
        if password:
            found.add(password)
        elif is_secret_name(key) and not value.startswith("$"):
            found.add(value)


def known_secrets(settings: BaseModel, environ: Mapping[str, str] | None = None) -> list[str]:
    """Secret values from the settings and the environment, longest first, each long enough to mask."""
    found: set[str] = set()
    _walk(settings, "", found)
    for name, value in (environ or {}).items():
        if is_secret_name(name):
            found.add(value)
        password = url_password(value)
        if password:
            found.add(password)
    return strong(found)


def strong(values: Iterable[str]) -> list[str]:
    """Distinct values worth masking, longest first (so a secret containing another is masked whole)."""
    return sorted({v for v in values if len(v.strip()) >= MIN_MASKED_LENGTH}, key=len, reverse=True)
