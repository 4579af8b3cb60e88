"""Structured logs: one JSON object per line, each carrying the trace id of the message being handled,
with every configured secret value masked before it is written.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterable

trace_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace_id", default=None)

MASK = "***"


class SecretMasker(logging.Filter):
    """Replace known secret values in the rendered message and its arguments."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets: set[str] = set()
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        self.secrets.update(s for s in secrets if s and len(s) >= 6)

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            record.msg = self.mask(record.getMessage())
            record.args = None
            if record.exc_info and record.exc_info[1] is not None:
                record.exc_text = self.mask(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        trace = getattr(record, "trace_id", None) or trace_id_var.get()
        if trace:
            payload["trace_id"] = trace
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            payload["exc"] = record.exc_text
        return json.dumps(payload, ensure_ascii=False)


_masker = SecretMasker()


def configure_logging(level: str = "INFO", secrets: Iterable[str] = (), stream=None) -> SecretMasker:  # type: ignore[no-untyped-def]
    """Install the JSON handler on the root logger (idempotent) and register secrets to mask."""
    _masker.add(secrets)
    root = logging.getLogger()
    root.setLevel(level)
    for handler in list(root.handlers):
        if getattr(handler, "_switchboard", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(_masker)
    handler._switchboard = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    for noisy in ("httpx", "httpcore", "aiosqlite", "websockets", "discord", "slack_bolt", "telegram"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    return _masker
