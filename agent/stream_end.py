"""A model answer whose stream ended without a finish reason was cut, not finished.

Why: an OpenAI-compatible stream that a proxy, a load balancer or an overloaded server closes half way
ends like a complete one — the client sees no error, only no ``finish_reason`` — and the half answer was
shown (and stored) as if it were the whole of it. Every provider's client records why an answer ended
(``finish_reason`` for OpenAI-compatible servers, Google and Mistral; ``stop_reason`` for Anthropic;
``done_reason`` for Ollama) in the message's ``response_metadata``; a message without any of them did
not get to its end.

The runtime asks the model once more when that happens (the cut attempt is dropped, and the text it
streamed is withdrawn from the live reply); when the second answer is cut too, it is kept, and the
reply ends with :data:`CUT_NOTE` so nobody takes it for the whole answer.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage

#: The metadata keys in which the provider clients record why an answer ended.
FINISH_KEYS = ("finish_reason", "stop_reason", "done_reason")

CUT_NOTE = "⚠️ …the model stopped early, so this answer is incomplete; say *continue* and I'll carry on."


def was_cut(message: BaseMessage) -> bool:
    """Whether ``message`` (a model's answer) ended without the provider saying why it ended."""
    if not isinstance(message, AIMessage):
        return False
    metadata = message.response_metadata or {}
    return not any(metadata.get(key) for key in FINISH_KEYS)
