"""Fitting a thread into the model's context window.

Before each model call the runtime estimates the size of what it would send (system prompts, the running
summary, the thread's messages, the tool schemas). When that is over the model's budget, the oldest
*units* of the thread are summarised into a running summary kept in the graph state, and removed from
the checkpoint (``RemoveMessage``) so it does not grow without bound.

A unit is what must stay together: a user message on its own, or an assistant message together with the
tool results that answer its tool calls — model APIs reject a tool call without its result, and a result
without its call. The newest units are kept whole; only a prefix of the thread is ever summarised.

Token counts are estimates (about four characters per token, plus a small cost per message): providers do
not expose their tokenizers offline, and ``tiktoken`` downloads its encodings at runtime. The estimate is
deliberately a little generous; if a provider still reports an overflow, the runtime compacts harder and
retries once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

#: Ids of hidden turns (goal continuations) start with this, so transcripts can tell them from the user.
HIDDEN_ID_PREFIX = "hidden-"
#: Per-message overhead (role, separators) providers add on top of the content.
MESSAGE_OVERHEAD_TOKENS = 4
#: An image block costs a fixed amount, not its base64 length.
IMAGE_TOKENS = 1000
#: What a normal compaction keeps of the history budget, so it is not redone every turn.
KEEP_FRACTION = 0.5
#: After the provider said "too long" anyway: keep much less.
HARD_KEEP_FRACTION = 0.2
#: The running summary is cut to this many characters before it is put in a prompt.
MAX_SUMMARY_CHARS = 6000
#: One message's share of a summariser transcript.
TRANSCRIPT_CHARS_PER_MESSAGE = 2000

SUMMARY_MARKER = "You condense the earlier part of a conversation"
SUMMARY_PROMPT = f"""{SUMMARY_MARKER} between a user and an assistant so the assistant can
continue it without the full history. Write a compact summary (at most about 300 words) of what matters
for the rest of the conversation: what the user wants, decisions and facts established, files and
commands that matter, results of tools, open questions and what the assistant promised to do next.
Keep names, numbers and paths exactly. Write it as notes, not as a dialogue. If a previous summary is
given, merge it with the new messages into one summary."""


def estimate_text_tokens(text: str) -> int:
    """About four characters per token; rounds up so short strings are not free."""
    return (len(text) + 3) // 4


def content_tokens(content: str | list[Any]) -> int:
    if isinstance(content, str):
        return estimate_text_tokens(content)
    total = 0
    for block in content:
        if isinstance(block, str):
            total += estimate_text_tokens(block)
        elif isinstance(block, dict) and block.get("type") in ("image_url", "image"):
            total += IMAGE_TOKENS
        elif isinstance(block, dict):
            total += estimate_text_tokens(str(block.get("text", "")))
    return total


def message_tokens(message: BaseMessage) -> int:
    tokens = MESSAGE_OVERHEAD_TOKENS + content_tokens(message.content)
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            tokens += estimate_text_tokens(call["name"]) + estimate_text_tokens(json.dumps(call["args"]))
        for bad in message.invalid_tool_calls:
            tokens += estimate_text_tokens(str(bad.get("args") or ""))
    return tokens


def messages_tokens(messages: Sequence[BaseMessage]) -> int:
    return sum(message_tokens(m) for m in messages)


def units(messages: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """Split the thread into units that must stay together (see the module docstring)."""
    result: list[list[BaseMessage]] = []
    for message in messages:
        if isinstance(message, ToolMessage) and result:
            result[-1].append(message)  # belongs to the assistant message that called the tool
        else:
            result.append([message])
    return result


@dataclass(frozen=True, slots=True)
class Split:
    """The thread cut in two: ``old`` is summarised and removed, ``recent`` is sent as it is."""

    old: list[BaseMessage]
    recent: list[BaseMessage]


def split_for_budget(messages: Sequence[BaseMessage], keep_tokens: int) -> Split:
    """Keep the newest whole units that fit ``keep_tokens``; always keep at least the last unit."""
    parts = units(messages)
    kept: list[list[BaseMessage]] = []
    used = 0
    for unit in reversed(parts):
        cost = messages_tokens(unit)
        if kept and used + cost > keep_tokens:
            break
        kept.append(unit)
        used += cost
    kept.reverse()
    # Prefer to start at a user message: some providers (Anthropic) refuse a history that opens with
    # the assistant. Only when one is kept, so a long tool loop keeps its latest results.
    first_user = next((i for i, u in enumerate(kept) if isinstance(u[0], HumanMessage)), None)
    if first_user:
        kept = kept[first_user:]
    cut = len(parts) - len(kept)
    return Split([m for u in parts[:cut] for m in u], [m for u in kept for m in u])


def speaker(message: BaseMessage) -> str | None:
    """Who said it, for transcripts; ``None`` for messages a transcript leaves out."""
    if isinstance(message, HumanMessage):
        if (message.id or "").startswith(HIDDEN_ID_PREFIX):
            return "Goal step (autonomous, not written by the user)"
        return "User"
    if isinstance(message, AIMessage):
        return "Assistant"
    if isinstance(message, ToolMessage):
        return f"Tool result ({message.name or 'tool'})"
    return None


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    )


def transcript_lines(messages: Sequence[BaseMessage]) -> list[str]:
    lines = []
    for message in messages:
        who = speaker(message)
        if who is None:
            continue
        text = _text(message).strip()
        if isinstance(message, AIMessage) and message.tool_calls:
            calls = ", ".join(f"{c['name']}({json.dumps(c['args'])[:200]})" for c in message.tool_calls)
            text = f"{text}\n[called {calls}]".strip()
        if text:
            if len(text) > TRANSCRIPT_CHARS_PER_MESSAGE:
                text = text[: TRANSCRIPT_CHARS_PER_MESSAGE - 1] + "…"
            lines.append(f"{who}: {text}")
    return lines


def chunk_lines(lines: Sequence[str], max_tokens: int) -> list[list[str]]:
    """Group transcript lines into pieces a summariser call can take in one request."""
    chunks: list[list[str]] = [[]]
    used = 0
    for line in lines:
        cost = estimate_text_tokens(line) + 1
        if chunks[-1] and used + cost > max_tokens:
            chunks.append([])
            used = 0
        chunks[-1].append(line)
        used += cost
    return [c for c in chunks if c]


def summary_request(previous: str | None, lines: Sequence[str]) -> list[BaseMessage]:
    body = f"Previous summary:\n{previous or '(none)'}\n\nNew messages to fold in:\n" + "\n".join(lines)
    return [SystemMessage(SUMMARY_PROMPT), HumanMessage(body)]


def summary_message(summary: str) -> SystemMessage:
    """How the running summary is shown to the model: context, not something anyone said."""
    return SystemMessage(
        "Summary of the earlier part of this conversation (older messages were condensed to fit; "
        f"treat it as your own notes):\n{summary[:MAX_SUMMARY_CHARS]}"
    )


@functools.cache
def _schemas_tokens(text: str) -> int:
    return estimate_text_tokens(text)


def tools_tokens(schemas: Sequence[dict[str, Any]]) -> int:
    """What the tool schemas cost in every request (they are sent with each call)."""
    return _schemas_tokens(json.dumps(list(schemas), sort_keys=True))
