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
    r"(KEY|TOKEN|SECRET|PASSW|PASSPHRASE|PWD$|CREDENTIAL|AUTH|COOKIE|SESSION|DSN|DATABASE_URL|DB_URL|_URI$|PRIVATE"
    # OTEL_EXPORTER_OTLP_HEADERS: "Authorization=Basic …" for a tracing backend (docs/operations.md#tracing)
    r"|_HEADERS$)"
)
# A few harmless names that contain a secret-looking fragment.
ALLOWED_NAMES = frozenset({"PWD", "OLDPWD", "PRIVATE_KEY_PATH", "AUTH_MODE", "MODE", "CARD_CONTENT_KEY"})
# Values that carry credentials even under an innocent name (``scheme://user:pass@host``).
CREDENTIAL_URL = re.compile(r"^[a-z][a-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@", re.I)
MASK = "***"
#: Shorter values would mask ordinary words (``true``, ``none``) all over the text.
MIN_MASKED_LENGTH = 6


class SecretMasker:
    """Replaces every secret value with ``***`` — the one masker behind logs, tool output and replies.

    Longest first, in a fixed order: when one secret contains another (a URL holding a password), the
    longer one is replaced whole before the shorter could cut it in two. Iterating a ``set`` here once
    made that depend on ``PYTHONHASHSEED``, so a secret could be partly logged.
    """

    __slots__ = ("values",)

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: list[str] = []
        self.add(values)

    @classmethod
    def of(cls, secrets: Mapping[str, str], known: Iterable[str] = ()) -> SecretMasker:
        """Mask a run's own secrets (``secrets``, 4 characters or more) and every secret the service knows."""
        # Very short values would mask ordinary words; they are still injected, just not masked.
        return cls([*(v for v in secrets.values() if len(v) >= 4), *known])

    def add(self, values: Iterable[str]) -> None:
        merged = set(self.values).union(v for v in values if v)
        self.values = sorted(merged, key=lambda v: (-len(v), v))

    @property
    def longest(self) -> int:
        return len(self.values[0]) if self.values else 0

    def __call__(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK)
        return text


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
    found.update(acp_env_values(settings))
    for name, value in (environ or {}).items():
        if is_secret_name(name):
            found.add(value)
        if name.upper().endswith("_HEADERS"):  # each header's value too (``k=v,k2=v2``, the OTel form)
            found.update(v.strip() for _, _, v in (h.partition("=") for h in value.split(",")) if v)
        password = url_password(value)
        if password:
            found.add(password)
    return strong(found)


def acp_env_values(settings: BaseModel) -> list[str]:
    """Every value of a coding agent's ``acp.env``: secrets whatever their names (docs/subagents.md)."""
    agent = getattr(settings, "agent", None)
    profiles = getattr(getattr(agent, "subagents", None), "profiles", None) or []
    return [
        value
        for profile in profiles
        if getattr(profile, "acp", None) is not None
        for value in profile.acp.env.values()
    ]


def strong(values: Iterable[str]) -> list[str]:
    """Distinct values worth masking, longest first (so a secret containing another is masked whole)."""
    return sorted({v for v in values if len(v.strip()) >= MIN_MASKED_LENGTH}, key=len, reverse=True)
