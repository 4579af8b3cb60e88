"""Structured logs: one JSON object per line (or readable text on a terminal), each carrying the trace id
of the message being handled and any structured fields, with every known secret value masked before it is
written.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterable
from typing import IO

from config.secrets import MIN_MASKED_LENGTH, SecretMasker

trace_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace_id", default=None)


class MaskingFilter(logging.Filter):
    """Replace known secret values in the rendered message, its fields and its traceback.

    The masking itself is :class:`config.secrets.SecretMasker`, the same one tool output and replies use.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.mask = SecretMasker()
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        self.mask.add(s for s in secrets if len(s) >= MIN_MASKED_LENGTH)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.mask.values:
            record.msg = self.mask(record.getMessage())
            record.args = None
            fields = getattr(record, "fields", None)
            if isinstance(fields, dict):
                record.fields = {k: self.mask(v) if isinstance(v, str) else v for k, v in fields.items()}
            if record.exc_info and record.exc_info[1] is not None:
                record.exc_text = self.mask(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
        return True


def _record_fields(record: logging.LogRecord) -> dict[str, object]:
    """Structured fields of a record: ``extra={"fields": {...}}`` plus the trace id of the message."""
    fields: dict[str, object] = {}
    given = getattr(record, "fields", None)
    if isinstance(given, dict):
        fields.update(given)
    trace = getattr(record, "trace_id", None) or trace_id_var.get()
    if trace and "trace_id" not in fields:
        fields["trace_id"] = trace
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers; structured fields are top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _record_fields(record).items():
            payload.setdefault(key, value)
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            payload["exc"] = record.exc_text
        return json.dumps(payload, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value …`` — for a person watching a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {message}"
        # A person reads the message; repeat only the fields it does not already say.
        fields = " ".join(
            f"{k}={v}" for k, v in _record_fields(record).items() if v is not None and str(v) not in message
        )
        if fields:
            line = f"{line}  {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        elif record.exc_text:
            line = f"{line}\n{record.exc_text}"
        return line


_masker = MaskingFilter()

#: Libraries that log every request at INFO; their lines drown the service's own.
NOISY_LOGGERS = (
    "httpx",
    "httpx2",
    "httpcore",
    "hpack",
    "aiosqlite",
    "asyncio",
    "websockets",
    "discord",
    "slack_bolt",
    "slack_sdk",
    "telegram",
    "openai",
    "urllib3",
    "Lark",
    "dingtalk_stream",
    "uvicorn.access",
)
LOG_FORMATS = ("json", "text")


def default_format(stream: IO[str] | None = None) -> str:
    """Text for a person at a terminal, JSON for anything else (files, journald, log shippers)."""
    target = stream or sys.stderr
    isatty = getattr(target, "isatty", None)
    return "text" if callable(isatty) and isatty() else "json"


def configure_logging(
    level: str = "INFO",
    secrets: Iterable[str] = (),
    stream: IO[str] | None = None,
    fmt: str | None = None,
    *,
    handler_level: str | None = None,
) -> MaskingFilter:
    """Install the handler on the root logger (idempotent) and register secrets to mask.

    ``fmt`` is ``json`` or ``text`` (default: text on a TTY); ``handler_level`` lets ``chat`` keep the
    terminal to warnings while a log file, if any, still gets everything at ``level``.
    """
    _masker.add(secrets)
    root = logging.getLogger()
    root.setLevel(level)
    for handler in list(root.handlers):
        if getattr(handler, "_switchboard", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    chosen = fmt or default_format(stream)
    handler.setFormatter(TextFormatter() if chosen == "text" else JsonFormatter())
    handler.addFilter(_masker)
    if handler_level:
        handler.setLevel(handler_level)
    handler._switchboard = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    floor = max(logging.WARNING, logging.getLevelName(level))
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(floor)
    return _masker


def mask_also(secrets: Iterable[str]) -> None:
    """Mask these too from now on (a reloaded config's new tokens and keys)."""
    _masker.add(secrets)


def add_file_handler(path: str, fmt: str = "json") -> logging.Handler:
    """Also write every log line (masked) to ``path``; ``switchboard chat --log-file`` uses it."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(TextFormatter() if fmt == "text" else JsonFormatter())
    handler.addFilter(_masker)
    handler._switchboard = True  # type: ignore[attr-defined]
    logging.getLogger().addHandler(handler)
    return handler
