"""Turn any failure during a turn into one plain sentence a chat user can act on.

Details (stack, provider response) go to the log under the message's trace id; the sentence never
contains a stack trace, a URL with credentials, or a secret.

Provider errors are recognised here too, so the runtime can react to them (a context overflow is
compacted and retried) without knowing each SDK's exception classes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent.models import ModelLoadError
from agent.rejections import describe_refusal

#: Phrases providers use when a request does not fit the model's context window. OpenAI and
#: compatible servers (vLLM, LiteLLM, Ollama's OpenAI API), Anthropic, Google and Mistral.
CONTEXT_OVERFLOW_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "context length exceeded",
    "context window",
    "reduce the length of the messages",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the maximum number of tokens",
    "input token count",
    "string too long",
)


#: Modules whose exceptions are a model service's failures, read by class name below.
_PROVIDER_MODULES = ("openai", "httpx", "anthropic", "langchain", "agent.chat_completions")


class ContextOverflowError(Exception):
    """The thread does not fit the model even after compaction; the chat is told what to do."""

    def __init__(self, model: str) -> None:
        super().__init__(f"the conversation does not fit model {model}'s context")
        self.model = model


def _error_code(exc: BaseException) -> str | None:
    """The provider's machine-readable error code, where the SDK exposes one (``openai`` does)."""
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code
    body: Any = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("code"), str):
            return str(inner["code"])
    return None


def is_context_overflow(exc: BaseException) -> bool:
    """Whether ``exc`` is a provider refusing a request because it is longer than the model's context.

    Checks the error code first (``context_length_exceeded`` on OpenAI's 400), then the message texts
    other providers use, but only for client errors (HTTP 400/413 or an SDK's bad-request class), so a
    server error that happens to mention tokens is not mistaken for one.
    """
    if isinstance(exc, ContextOverflowError):
        return True
    # LangChain re-raises the SDK's error as its own class; the code is on the original (the cause).
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if _error_code(seen) == "context_length_exceeded":
            return True
        seen = seen.__cause__ or seen.__context__
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if status not in (400, 413) and not ("BadRequest" in name or "InvalidRequest" in name):
        return False
    text = str(exc).lower()
    return any(phrase in text for phrase in CONTEXT_OVERFLOW_PHRASES)


def describe_error(exc: BaseException) -> str:
    """One sentence for the chat: what went wrong and what the person (or an admin) can do."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if isinstance(exc, ContextOverflowError):
        return f"This conversation is too long for model {exc.model} — send /new or /compact."
    if is_context_overflow(exc):  # a refusal for length the runtime did not get to compact
        return "This conversation is too long for the model — send /new or /compact."
    refusal = describe_refusal(exc)  # quotes the provider's reason, made safe to show
    if refusal is not None:
        return refusal
    if isinstance(exc, ModelLoadError):
        return "The model is not set up correctly, so I can't answer yet — an operator needs to check the config."
    if isinstance(exc, TimeoutError | asyncio.TimeoutError) or "Timeout" in name:
        return "The model took too long to answer. Please try again."
    # Our own chat model's errors carry the ``openai`` SDK's class names (agent/chat_completions).
    if module.startswith(_PROVIDER_MODULES) or name.startswith("API"):
        if "Authentication" in name or "PermissionDenied" in name:
            return "The model service rejected our credentials — an operator needs to check the API key."
        if "RateLimit" in name:
            return "The model service is rate limiting us right now. Please try again in a minute."
        if "Connection" in name or "ConnectError" in name:
            return "I couldn't reach the model service. Please try again shortly."
        if "BadRequest" in name or "NotFound" in name or "UnprocessableEntity" in name:
            return "The model service refused the request (the model name or input may be wrong)."
        if "InternalServer" in name or "APIStatus" in name or "APIError" in name:
            return "The model service had an error while answering. Please try again."
    if "GraphRecursion" in name:
        return "I stopped because this task needed more steps than I'm allowed in one turn."
    return "Something went wrong while I was answering."
