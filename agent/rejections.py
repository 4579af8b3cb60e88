"""A model service's refusal of one request (HTTP 400/404/422), as a sentence that says what was wrong.

Why its own module: a refused request is the one provider failure where the provider's own words help
the person in the chat ("Unsupported parameter: 'temperature'", "The model `gpt-x` does not exist"),
so unlike other errors the sentence quotes them, and quoting text from outside needs care: the reason
is cut short, put on one line, and URLs and anything shaped like a key are replaced, so no credential
that a provider or proxy echoes back reaches the chat.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from langchain_core.exceptions import ModelInvalidRequestError, ModelNotFoundError

from agent import chat_completions as cc

#: Longest provider reason quoted in the chat.
MAX_REASON_CHARS = 160
#: Any URL (credentials, signed query strings and internal host names alike stay out of the chat).
_URL = re.compile(r"\b[a-z][a-z0-9+.\-]*://\S+", re.I)
#: Key-shaped words: ``sk-…`` style prefixes, ``Bearer …``, a value after ``api_key=``/``token:``/…, and
#: long unbroken tokens (a word like ``max_tokens`` or ``token_limit`` stays readable).
_KEYISH = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{6,}"
    r"|\bBearer\s+\S+"
    r"|\b(?:api[_-]?key|key|token|secret|password)\s*[=:]\s*\S+"
    r"|\b[A-Za-z0-9_\-+/=]{32,}",
    re.I,
)
#: The prefix the ``openai`` SDK puts before the provider's message in ``str(exc)``.
_SDK_PREFIX = re.compile(r"^Error code: \d{3} - ")
#: Error codes OpenAI-compatible services use for a model name they do not serve.
_UNKNOWN_MODEL_CODES = frozenset({"model_not_found", "invalid_model"})
#: Error codes of a request refused for its content.
_CONTENT_CODES = frozenset({"content_filter", "content_policy_violation", "invalid_prompt"})
#: Error codes of a parameter the model does not take (the configuration's to fix).
_SETTING_CODES = frozenset({"unsupported_parameter", "unsupported_value"})
#: What a refusal is: our chat model's 400/404/422 classes, and LangChain's provider-neutral ones (which
#: other LangChain providers raise); the ``openai`` SDK's are added by :func:`_sdk_classes`.
_REFUSALS: tuple[type[BaseException], ...] = (
    cc.BadRequestError,
    cc.NotFoundError,
    cc.UnprocessableEntityError,
    ModelInvalidRequestError,
    ModelNotFoundError,
)
_NOT_FOUND: tuple[type[BaseException], ...] = (cc.NotFoundError, ModelNotFoundError)


def _sdk_classes(*names: str) -> tuple[type[BaseException], ...]:
    """The ``openai`` SDK's classes of those names, when something (``ChatOpenAI``) imported it: an
    error of that SDK cannot exist otherwise, and importing it here would cost ~20 MiB for nothing."""
    openai: Any = sys.modules.get("openai")
    if openai is None:
        return ()
    return tuple(getattr(openai, name) for name in names if isinstance(getattr(openai, name, None), type))


def _refusal(exc: BaseException) -> BaseException | None:
    """The refusal in ``exc`` or its causes (a library may wrap the SDK's error in its own)."""
    refusals = _REFUSALS + _sdk_classes("BadRequestError", "NotFoundError", "UnprocessableEntityError")
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, refusals):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _provider_message(exc: BaseException) -> tuple[str, str | None]:
    """The provider's own message and error code (OpenAI's ``{"error": {"message", "code"}}`` body)."""
    api_errors: tuple[type[BaseException], ...] = (cc.APIError, *_sdk_classes("APIError"))
    body = getattr(exc, "body", None)
    if isinstance(exc, api_errors) and isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            code = inner.get("code")
            return str(inner["message"]), code if isinstance(code, str) else None
    code = getattr(exc, "code", None) if isinstance(exc, api_errors) else None
    return _SDK_PREFIX.sub("", str(exc)), code if isinstance(code, str) else None


def safe_reason(text: str) -> str:
    """``text`` fit to quote in a chat: one line, no URL, nothing key-shaped, at most
    ``MAX_REASON_CHARS`` (cut at a word), without a trailing full stop (the sentence adds its own)."""
    flat = " ".join(text.split())
    flat = _KEYISH.sub("***", _URL.sub("<url>", flat))
    if len(flat) > MAX_REASON_CHARS:
        flat = flat[:MAX_REASON_CHARS].rsplit(" ", 1)[0] + " …"
    return flat.rstrip(" .") or "no reason given"


def describe_refusal(exc: BaseException) -> str | None:
    """The sentence for a request the model service refused, or None when ``exc`` is not one.

    What to do depends on who can fix it: an unknown model or a parameter the model does not take is
    the configuration (an admin's job); content the service will not process is the person's to
    rephrase; anything else may be this thread's content, so ``/new`` is the way out."""
    refusal = _refusal(exc)
    if refusal is None:
        return None
    message, code = _provider_message(refusal)
    reason = safe_reason(message)
    if code in _UNKNOWN_MODEL_CODES or isinstance(refusal, _NOT_FOUND + _sdk_classes("NotFoundError")):
        return (
            f"The model service does not know the configured model ({reason}) — ask an admin to check the"
            " model settings."
        )
    if code in _CONTENT_CODES:
        return f"The model service refused this request for its content ({reason}). Try rephrasing it."
    if code in _SETTING_CODES:
        return (
            f"The model rejected the request: {reason}. This is a model setting, not your message — ask an"
            " admin to check the model settings."
        )
    return (
        f"The model rejected the request: {reason}. Send /new to start a fresh conversation; if that"
        " fails too, ask an admin to check the model settings."
    )
