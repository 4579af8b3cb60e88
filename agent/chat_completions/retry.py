"""When to ask the model service again, and how long to wait first.

The same rules as the ``openai`` SDK, so a configuration moved from ``ChatOpenAI`` behaves the same:
timeouts, connection failures, 408, 409, 429 and 5xx are retried (``max_retries`` times, default 2),
with exponential backoff from 0.5 s up to 8 s and some jitter, or after the server's ``Retry-After``
(seconds, milliseconds or an HTTP date) when that is at most a minute. ``x-should-retry`` overrides.
"""

from __future__ import annotations

import email.utils
import random
import time

import httpx

INITIAL_DELAY = 0.5
MAX_DELAY = 8.0
#: A longer Retry-After is not waited for: the turn fails and says so.
MAX_RETRY_AFTER = 60.0


def should_retry(response: httpx.Response) -> bool:
    forced = response.headers.get("x-should-retry")
    if forced in ("true", "false"):
        return forced == "true"
    return response.status_code in (408, 409, 429) or response.status_code >= 500


def _retry_after(headers: httpx.Headers | None) -> float | None:
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return float(millis) / 1000
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        return None if parsed is None else email.utils.mktime_tz(parsed) - time.time()


def delay(retries_left: int, max_retries: int, headers: httpx.Headers | None = None) -> float:
    """Seconds to wait before the next attempt (``retries_left`` counts this one)."""
    after = _retry_after(headers)
    if after is not None and 0 < after <= MAX_RETRY_AFTER:
        return after
    done = min(max_retries - retries_left, 1000)
    return min(INITIAL_DELAY * 2.0**done, MAX_DELAY) * (1 - 0.25 * random.random())
