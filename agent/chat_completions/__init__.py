"""A small chat model for OpenAI-compatible ``/chat/completions`` APIs (the default ``models[].use``).

:class:`ChatCompletions` is the class; the error classes mirror the ``openai`` SDK's names so the chat's
sentences read the same for either (``agent/errors.py``, ``agent/rejections.py``).
"""

from agent.chat_completions.errors import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    UnprocessableEntityError,
)
from agent.chat_completions.model import ChatCompletions

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "ChatCompletions",
    "InternalServerError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "UnprocessableEntityError",
]
