"""The one place githubkit/httpx failures become :mod:`channels.errors`.

Messages name the method, path and status only — never headers, bodies or tokens.
"""

from __future__ import annotations

import httpx
from githubkit.exception import RateLimitExceeded, RequestError, RequestFailed, RequestTimeout

from channels.errors import (
    BadRequest,
    ChannelError,
    Conflict,
    EditFailed,
    Forbidden,
    NetworkError,
    RetryAfter,
)

#: When GitHub says "secondary rate limit" without a Retry-After, its docs say wait at least a minute.
SECONDARY_LIMIT_WAIT = 60.0


def _where(exc: RequestFailed) -> str:
    request = exc.request
    return f"{request.method} {request.url.path} → {exc.response.status_code}"


def map_github_error(exc: BaseException, *, editing: bool = False) -> ChannelError:
    """Translate a githubkit/httpx exception. ``editing`` turns a 404 into EditFailed (comment gone)."""
    if isinstance(exc, ChannelError):
        return exc
    if isinstance(exc, RateLimitExceeded):
        return RetryAfter(exc.retry_after.total_seconds(), "GitHub rate limit")
    if isinstance(exc, RequestFailed):
        status = exc.response.status_code
        where = _where(exc)
        headers = exc.response.headers
        retry_after = headers.get("retry-after")
        if status in (403, 429) and retry_after is not None:
            try:
                return RetryAfter(float(retry_after), f"GitHub rate limit ({where})")
            except ValueError:
                return RetryAfter(SECONDARY_LIMIT_WAIT, f"GitHub rate limit ({where})")
        if status == 429 or (status == 403 and "rate limit" in exc.response.text.lower()):
            return RetryAfter(SECONDARY_LIMIT_WAIT, f"GitHub secondary rate limit ({where})")
        if status == 404 and editing:
            return EditFailed(f"comment can no longer be edited ({where})")
        if status in (401, 403, 404):
            return Forbidden(
                f"GitHub refused the call; check the App's permissions and installation ({where})"
            )
        if status == 409:
            return Conflict(f"GitHub reported a conflict ({where})")
        if status in (400, 410, 422):
            return (
                EditFailed(f"GitHub rejected the edit ({where})")
                if editing
                else BadRequest(f"GitHub rejected the request ({where})")
            )
        if status >= 500:
            return NetworkError(f"GitHub server error ({where})")
        return BadRequest(f"unexpected GitHub response ({where})")
    if isinstance(exc, RequestTimeout):
        return NetworkError("GitHub request timed out")
    if isinstance(exc, RequestError):
        return NetworkError(f"GitHub request failed: {type(exc.exc).__name__}")
    if isinstance(exc, httpx.HTTPError):
        return NetworkError(f"GitHub request failed: {type(exc).__name__}")
    return NetworkError(f"GitHub call failed: {type(exc).__name__}")
