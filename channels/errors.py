"""The error tree every channel maps its SDK's failures into, in one place per platform.

::

    ChannelError
     ├── RetryAfter            the platform asked us to slow down (carries seconds to wait)
     ├── MessageNotModified    an edit with identical content; harmless, ignored by the scheduler
     ├── EditFailed            the message can no longer be edited (deleted, too old, card broken)
     ├── Forbidden             the bot may not post here (kicked, blocked, missing scope)
     ├── BadRequest            the platform rejected the payload (e.g. markup it cannot parse)
     ├── NetworkError          transport failure or 5xx; retrying later may work
     ├── Conflict              another client holds the connection (e.g. a second Telegram poller)
     └── FileTooLarge          an inbound/outbound file exceeds the platform or configured cap

    Backpressure               raised by the inbox sink when it cannot accept more: the worker must
                               make the platform redeliver (nack / don't ack), never drop the message.
"""

from __future__ import annotations


class ChannelError(Exception):
    """A platform call failed. ``str(error)`` is safe to log: it never contains tokens."""


class RetryAfter(ChannelError):
    def __init__(self, retry_after: float, message: str = "rate limited") -> None:
        self.retry_after = max(0.0, float(retry_after))
        super().__init__(f"{message}; retry after {self.retry_after:g}s")


class MessageNotModified(ChannelError):
    pass


class EditFailed(ChannelError):
    pass


class Forbidden(ChannelError):
    pass


class BadRequest(ChannelError):
    pass


class NetworkError(ChannelError):
    pass


class Conflict(ChannelError):
    pass


class FileTooLarge(ChannelError):
    def __init__(self, name: str, size: int, limit: int) -> None:
        self.name, self.size, self.limit = name, size, limit
        super().__init__(f"file {name!r} is {size} bytes; the limit is {limit} bytes")


class Backpressure(Exception):
    """The bus is full. The worker should answer the platform with a retryable failure."""
