"""Errors of an OpenAI-compatible chat completions call, shaped like the ``openai`` SDK's.

Why the same names: the chat's sentences (``agent/errors.py``, ``agent/rejections.py``) were written
against the SDK's classes, and a configuration that still uses ``langchain_openai:ChatOpenAI`` raises
those; with the same class names and attributes (``status_code``, ``code``, ``body``) both read alike.
The message is the provider's own ``error.message`` and nothing else: no URL, no header, no key.
"""

from __future__ import annotations

import json
from typing import Any


class APIError(Exception):
    """A chat completions call failed; ``code`` is the provider's machine-readable error code, if any."""

    status_code: int | None = None

    def __init__(self, message: str, *, code: str | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.body = body


class APIConnectionError(APIError):
    """The service could not be reached, or the connection broke before the answer was complete."""

    def __init__(self, message: str = "Connection error.") -> None:
        super().__init__(message)


class APITimeoutError(APIConnectionError):
    def __init__(self) -> None:
        super().__init__("Request timed out.")


class APIStatusError(APIError):
    """The service answered with an HTTP error status."""

    def __init__(self, message: str, *, status_code: int, code: str | None = None, body: Any = None) -> None:
        super().__init__(message, code=code, body=body)
        self.status_code = status_code


class BadRequestError(APIStatusError):
    pass


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    pass


class UnprocessableEntityError(APIStatusError):
    pass


class RateLimitError(APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error(status: int, raw: bytes) -> APIStatusError:
    """The error for an HTTP error answer: OpenAI's ``{"error": {"message", "code"}}`` body when it is
    one, else the start of the body as text (a proxy's HTML page says little, and it is cut short)."""
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = None
    inner = body.get("error", body) if isinstance(body, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    if not isinstance(message, str):
        message = raw[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
    code = inner.get("code") if isinstance(inner, dict) else None
    cls = _BY_STATUS.get(status, InternalServerError if status >= 500 else APIStatusError)
    return cls(message, status_code=status, code=code if isinstance(code, str) else None, body=body)


def stream_error(event: dict[str, Any]) -> APIError:
    """An ``{"error": …}`` event inside a stream (some servers report a failure mid-answer this way)."""
    inner = event.get("error")
    if isinstance(inner, dict):
        code = inner.get("code")
        return APIError(
            str(inner.get("message") or "error in stream"),
            code=code if isinstance(code, str) else None,
            body=event,
        )
    return APIError(str(inner or "error in stream"), body=event)
