"""What one turn of the agent carries outside its checkpoint, and the thread's checkpointed shape.

Kept apart from the runtime (agent/runtime.py) so the pieces that read messages — ``/compact``, goal
runs, thread history, benchmarks — need not import the LangGraph loop itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.graph import MessagesState

from agent.events import FULL_PROFILE, ToolProfile
from agent.tools import ToolContext


def message_text(message: BaseMessage) -> str:
    """Visible text of a message whose content may be a string or a list of content blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def without_images(message: BaseMessage) -> BaseMessage:
    """Images from an earlier vision turn, replaced by a note, for a model that cannot see them."""
    if isinstance(message.content, str) or not any(
        isinstance(b, dict) and b.get("type") == "image_url" for b in message.content
    ):
        return message
    text = message_text(message)
    return message.model_copy(update={"content": f"{text}\n[image omitted]".strip()})


class ThreadState(MessagesState, total=False):
    """The checkpointed state of a thread: its messages plus the running summary of older ones."""

    summary: str


class ThreadChanged(Exception):
    """The thread got new messages while ``/compact`` was summarising it; nothing was changed."""


@dataclass(frozen=True, slots=True)
class CompactResult:
    """What ``/compact`` did: messages folded into the summary, estimated tokens before and after."""

    summarised: int
    tokens_before: int
    tokens_after: int


@dataclass(slots=True)
class Run:
    """Per-turn data the graph nodes need but the checkpoint must not store."""

    system_prompt: str
    context_prompt: str
    model: Any
    vision: bool
    tools: ToolContext
    model_name: str = "default"
    context_tokens: int = 128_000
    profile: ToolProfile = FULL_PROFILE
    texts: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    #: The model's last answer was cut off twice (agent/stream_end.py): the reply says so.
    cut: bool = False

    def count(self, usage: Any) -> None:
        """Add one model call's usage report (LangChain's ``usage_metadata``; cached prompt tokens are
        ``input_token_details.cache_read``, part of ``input_tokens``)."""
        if not usage:
            return
        self.input_tokens += int(usage.get("input_tokens", 0))
        self.output_tokens += int(usage.get("output_tokens", 0))
        self.cached_tokens += int((usage.get("input_token_details") or {}).get("cache_read", 0) or 0)


@dataclass(frozen=True, slots=True)
class AskedAgain:
    """Written to the graph's stream when a cut-off answer is asked for again (see ``_invoke``)."""
