"""LangChain messages to the chat completions JSON and back, for exactly what Switchboard sends.

Why by hand: the ``openai`` SDK re-walks every message and tool schema of every request through its
typed transform (the largest per-turn cost of a long thread, docs/PERFORMANCE.md) and costs ~20 MiB
of imports; the request here is plain dicts handed to ``json``.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call

#: Content block types a user message may carry as they are (text, and images as data URLs).
_PASSED_BLOCKS = frozenset({"text", "image_url", "input_audio", "file"})


def _text(content: str | list[Any]) -> str:
    """The text of ``content`` (reasoning and other non-text blocks of an answer are not sent back)."""
    if isinstance(content, str):
        return content
    parts = [
        b if isinstance(b, str) else b.get("text", "")
        for b in content
        if isinstance(b, str) or b.get("type") == "text"
    ]
    return "".join(parts)


def _user_content(content: str | list[Any]) -> str | list[Any]:
    if isinstance(content, str):
        return content
    blocks: list[Any] = []
    for block in content:
        if isinstance(block, str):
            blocks.append({"type": "text", "text": block})
        elif block.get("type") in _PASSED_BLOCKS:
            blocks.append(block)
        elif block.get("type") == "image" and block.get("base64"):  # LangChain's standard image block
            url = f"data:{block.get('mime_type', 'image/png')};base64,{block['base64']}"
            blocks.append({"type": "image_url", "image_url": {"url": url}})
    return blocks


def _assistant(message: AIMessage) -> dict[str, Any]:
    calls: list[dict[str, Any]] = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
        }
        for c in message.tool_calls
    ]
    calls += [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["args"] or ""}}
        for c in message.invalid_tool_calls
    ]
    out: dict[str, Any] = {"role": "assistant", "content": _text(message.content) or None}
    if calls:
        out["tool_calls"] = calls
    return out


def to_wire(message: BaseMessage) -> dict[str, Any]:
    """One message as the API takes it."""
    if isinstance(message, AIMessage):
        return _assistant(message)
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": _text(message.content)}
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": _text(message.content)}
    if isinstance(message, HumanMessage):
        out: dict[str, Any] = {"role": "user", "content": _user_content(message.content)}
        if message.name:
            out["name"] = message.name
        return out
    if isinstance(message, ChatMessage):
        return {"role": message.role, "content": _text(message.content)}
    raise TypeError(f"cannot send a {type(message).__name__} to a chat completions API")


def usage(raw: dict[str, Any] | None) -> UsageMetadata | None:
    """LangChain's usage record from OpenAI's ``usage`` (cached prompt tokens as ``cache_read``)."""
    if not raw:
        return None
    prompt, completion = int(raw.get("prompt_tokens") or 0), int(raw.get("completion_tokens") or 0)
    record = UsageMetadata(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=int(raw.get("total_tokens") or prompt + completion),
    )
    cached = (raw.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        record["input_token_details"] = {"cache_read": int(cached)}
    reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None:
        record["output_token_details"] = {"reasoning": int(reasoning)}
    return record


def chunk_message(event: dict[str, Any]) -> AIMessageChunk | None:
    """One streamed event as a message chunk, or None when it carries nothing (the opening role delta)."""
    metadata: dict[str, Any] = {}
    content = ""
    calls = []
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        content += delta.get("content") or ""
        for call in delta.get("tool_calls") or []:
            function = call.get("function") or {}
            calls.append(
                tool_call_chunk(
                    name=function.get("name"),
                    args=function.get("arguments"),
                    id=call.get("id"),
                    index=call.get("index"),
                )
            )
        if choice.get("finish_reason"):
            metadata = {"finish_reason": choice["finish_reason"], "model_name": event.get("model")}
    used = usage(event.get("usage"))
    if not (content or calls or metadata or used):
        return None
    return AIMessageChunk(
        content=content,
        tool_call_chunks=calls,
        response_metadata=metadata,
        usage_metadata=used,
        id=event.get("id"),
    )


def full_message(body: dict[str, Any]) -> AIMessage:
    """A whole (not streamed) answer."""
    choice = (body.get("choices") or [{}])[0]
    raw = choice.get("message") or {}
    calls, invalid = [], []
    for call in raw.get("tool_calls") or []:
        try:
            calls.append(parse_tool_call(call, return_id=True))
        except Exception as exc:  # an answer with unparseable arguments becomes an invalid call
            invalid.append(make_invalid_tool_call(call, str(exc)))
    metadata = {"finish_reason": choice.get("finish_reason"), "model_name": body.get("model")}
    return AIMessage(
        content=raw.get("content") or "",
        tool_calls=[c for c in calls if c],
        invalid_tool_calls=invalid,
        response_metadata=metadata,
        usage_metadata=usage(body.get("usage")),
        id=body.get("id"),
    )
