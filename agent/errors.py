"""Turn any failure during a turn into one plain sentence a chat user can act on.

Details (stack, provider response) go to the log under the message's trace id; the sentence never
contains a stack trace, a URL with credentials, or a secret.
"""

from __future__ import annotations

import asyncio

from agent.models import ModelLoadError


def describe_error(exc: BaseException) -> str:
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if isinstance(exc, ModelLoadError):
        return "The model is not set up correctly, so I can't answer yet — an operator needs to check the config."
    if isinstance(exc, TimeoutError | asyncio.TimeoutError) or "Timeout" in name:
        return "The model took too long to answer. Please try again."
    if module.startswith(("openai", "httpx", "anthropic", "langchain")) or name.startswith("API"):
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
