"""A fake OpenAI-compatible chat completions server (streaming SSE and plain JSON).

Tests script what the "model" answers::

    with FakeOpenAI() as llm:
        llm.script(Reply(text="Hello!"), Reply(tool_calls=[ToolCall("bash", {"command": "ls"})]))
        settings.models[0].base_url = llm.base_url

Unscripted requests get ``default_reply(request)`` — by default an echo of the last user message — so
multi-turn flows work without scripting every call. Every request body is kept in ``requests``.

Requests running side by side (a turn and its subagents) would race for one script, so
``script_for(marker, ...)`` keeps a script of its own for requests whose prompt (system messages and
first user message) contains ``marker``. A :class:`Hold` on a reply keeps its answer back until the test
lets it go, and counts the answers waiting at once: overlap proven by an event, not by timing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import ThreadedServer


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | str
    id: str | None = None


class Hold:
    """A gate answers wait at (on the fake's loop) until :meth:`release` or :meth:`open` lets them go."""

    def __init__(self, limit_seconds: float = 60.0) -> None:
        self._cond = threading.Condition()
        self._permits = 0
        self._open = False
        self.limit_seconds = limit_seconds
        self.waiting = 0
        self.most = 0
        self.passed = 0

    def release(self, count: int = 1) -> None:
        with self._cond:
            self._permits += count
            self._cond.notify_all()

    def open(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def wait_for_waiting(self, count: int, timeout: float = 30.0) -> None:
        """Block until ``count`` answers wait here at the same time (AssertionError after ``timeout``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.waiting >= count, timeout):
                raise AssertionError(f"{self.waiting} answer(s) waiting at the hold, expected {count}")

    def wait_for_passed(self, count: int, timeout: float = 30.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.passed >= count, timeout):
                raise AssertionError(f"{self.passed} answer(s) passed the hold, expected {count}")

    def _pass(self) -> None:
        """Runs in a worker thread of the fake's loop; a forgotten hold gives up after ``limit_seconds``."""
        with self._cond:
            self.waiting += 1
            self.most = max(self.most, self.waiting)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._open or self._permits > 0, self.limit_seconds)
            if not self._open and self._permits > 0:
                self._permits -= 1
            self.waiting -= 1
            self.passed += 1
            self._cond.notify_all()


@dataclass
class Reply:
    """One model answer. ``chunk_size`` controls how text is streamed; ``delay`` is per chunk (a
    non-streamed answer waits as long as its chunks would have taken)."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    chunk_size: int = 8
    delay: float = 0.0
    status: int = 200
    error: str | None = None
    #: OpenAI's error JSON fields for a non-200 answer (``type``, ``code``, ``param``).
    error_type: str = "fake_error"
    error_code: str | None = None
    error_param: str | None = None
    retry_after: float | None = None
    prompt_tokens: int = 10
    completion_tokens: int | None = None
    #: Of ``prompt_tokens``, how many the server says came from its prompt cache
    #: (``usage.prompt_tokens_details.cached_tokens``, as OpenAI reports it).
    cached_tokens: int = 0
    abort_after_chunks: int | None = None  # drop the connection mid-stream after this many text chunks
    #: End the stream cleanly after this many text chunks, with no finish_reason and no ``[DONE]``: what
    #: a proxy or an overloaded server that gives up half way sends (the client sees a normal end).
    cut_after_chunks: int | None = None
    #: Wait at this hold before answering (see :class:`Hold`).
    hold: Hold | None = None
    #: With ``hold``: wait there after this many text chunks instead, mid-stream — an answer that is
    #: certainly still streaming while the test does something, without a stream sized as a margin.
    hold_after_chunks: int | None = None
    #: Seconds the body stays open after ``data: [DONE]`` before it ends (a server slow to finish it).
    linger_after_done: float = 0.0


def prompt_text(request: dict[str, Any]) -> str:
    """The system messages and the first user message of a request: who is asking, for what."""
    parts: list[str] = []
    for message in request.get("messages", []):
        content = message.get("content")
        text = (
            " ".join(part.get("text", "") for part in content if isinstance(part, dict))
            if isinstance(content, list)
            else str(content or "")
        )
        if message.get("role") == "system":
            parts.append(text)
        elif message.get("role") == "user":
            parts.append(text)
            break
    return "\n".join(parts)


def last_user_text(request: dict[str, Any]) -> str:
    for message in reversed(request.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content)
    return ""


def request_tokens(body: dict[str, Any]) -> int:
    """The fake's own token count for a request: the JSON of its messages and tools, ~3.5 chars a token.

    Deliberately not the runtime's estimate (real tokenizers disagree with any estimate too), and a
    little stricter, so the runtime's overflow retry is exercised by honest arithmetic.
    """
    size = len(json.dumps(body.get("messages", []))) + len(json.dumps(body.get("tools", [])))
    return int(size / 3.5) + int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)


def accepted(llm: FakeOpenAI) -> list[dict[str, Any]]:
    """Requests the fake answered (not refused for their size)."""
    rejected = {id(b) for b in llm.rejected}
    return [b for b in llm.completions if id(b) not in rejected]


def echo_reply(request: dict[str, Any]) -> Reply:
    return Reply(text=f"echo: {last_user_text(request)}")


class FakeOpenAI(ThreadedServer):
    def __init__(self, default_reply: Callable[[dict[str, Any]], Reply] = echo_reply) -> None:
        super().__init__()
        self.default_reply = default_reply
        self._script: deque[Reply] = deque()
        self._routed: list[tuple[str, deque[Reply]]] = []
        self._script_lock = threading.Lock()
        self._ids = itertools.count(1)
        self.api_key_seen: list[str] = []
        #: When set, requests whose estimated size exceeds it are refused as the real API does (400,
        #: ``context_length_exceeded``); ``rejected`` keeps their bodies.
        self.context_limit: int | None = None
        self.rejected: list[dict[str, Any]] = []
        # A path of its own: the OpenAI SDK caches one HTTP client per base URL for the whole process, so
        # a later fake that got the same port would inherit a client bound to an earlier test's loop.
        self.prefix = f"/fake-{uuid.uuid4().hex[:12]}"

    @property
    def base_url(self) -> str:
        return f"{self.url}{self.prefix}/v1"

    def script(self, *replies: Reply) -> None:
        with self._script_lock:
            self._script.extend(replies)

    def script_for(self, marker: str, *replies: Reply) -> None:
        """Answers for requests whose prompt contains ``marker`` (checked in the order markers were added)."""
        with self._script_lock:
            for known, queue in self._routed:
                if known == marker:
                    queue.extend(replies)
                    return
            self._routed.append((marker, deque(replies)))

    @property
    def completions(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["path"] == "/v1/chat/completions"]

    @property
    def completion_times(self) -> list[tuple[float, float | None]]:
        """(started, finished) per completion request, in arrival order, on ``time.monotonic()``.

        ``finished`` is None until the whole answer was written (and stays None for an error answer).
        """
        with self._lock:
            return [
                (r["started"], r["finished"]) for r in self.requests if r["path"] == "/v1/chat/completions"
            ]

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._script_lock:
            if self._routed:
                prompt = prompt_text(body)
                routed = next((queue for marker, queue in self._routed if marker in prompt), None)
                if routed is not None:  # never the main script: that belongs to the other requests
                    return routed.popleft() if routed else self.default_reply(body)
            if self._script:
                return self._script.popleft()
        return self.default_reply(body)

    def setup_routes(self, app: web.Application) -> None:
        app.router.add_post(f"{self.prefix}/v1/chat/completions", self._completions)
        app.router.add_get(f"{self.prefix}/v1/models", self._models)

    async def _models(self, request: web.Request) -> web.Response:
        self.record({"path": "/v1/models", "body": None})
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.api_key_seen.append(request.headers.get("Authorization", ""))
        # When the answer started and (once its last byte is written) finished, on time.monotonic(): a
        # test can tell which model answers were complete at a given moment.
        entry: dict[str, Any] = {
            "path": "/v1/chat/completions",
            "body": body,
            "started": time.monotonic(),
            "finished": None,
            # The client's address and port: two requests with the same one came on one kept-alive connection.
            "peer": request.transport.get_extra_info("peername") if request.transport else None,
        }
        self.record(entry)
        if self.context_limit is not None and request_tokens(body) > self.context_limit:
            with self._lock:
                self.rejected.append(body)
            return web.json_response(
                {
                    "error": {
                        "message": f"This model's maximum context length is {self.context_limit} tokens. "
                        f"However, your messages resulted in {request_tokens(body)} tokens. "
                        "Please reduce the length of the messages.",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                },
                status=400,
            )
        reply = self._next_reply(body)
        if reply.hold is not None and reply.hold_after_chunks is None:
            await asyncio.get_running_loop().run_in_executor(None, reply.hold._pass)
        if reply.status != 200:
            headers = {"retry-after": str(reply.retry_after)} if reply.retry_after is not None else {}
            return web.json_response(
                {
                    "error": {
                        "message": reply.error or "fake failure",
                        "type": reply.error_type,
                        "param": reply.error_param,
                        "code": reply.error_code,
                    }
                },
                status=reply.status,
                headers=headers,
            )
        completion_id = f"chatcmpl-{next(self._ids)}"
        model = body.get("model", "fake-model")
        usage: dict[str, Any] = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens or max(1, len(reply.text) // 4),
            "total_tokens": reply.prompt_tokens + (reply.completion_tokens or max(1, len(reply.text) // 4)),
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        }
        if not body.get("stream"):
            if reply.delay:  # as long as the streamed answer would take
                chunks = max(1, -(-len(reply.text) // max(1, reply.chunk_size)))
                await asyncio.sleep(reply.delay * chunks)
            entry["finished"] = time.monotonic()
            return web.json_response(self._full(completion_id, model, reply, usage))
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def emit(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await emit({"role": "assistant", "content": ""})
        for index, start in enumerate(range(0, len(reply.text), max(1, reply.chunk_size))):
            if reply.abort_after_chunks is not None and index >= reply.abort_after_chunks:
                await response.write(b"data: {not json")
                assert request.transport is not None
                request.transport.close()
                return response
            if reply.cut_after_chunks is not None and index >= reply.cut_after_chunks:
                await response.write_eof()
                return response
            if reply.hold is not None and index == reply.hold_after_chunks:
                await asyncio.get_running_loop().run_in_executor(None, reply.hold._pass)
            if reply.delay:
                await asyncio.sleep(reply.delay)
            await emit({"content": reply.text[start : start + reply.chunk_size]})
        for index, call in enumerate(reply.tool_calls):
            args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            call_id = call.id or f"call_{next(self._ids)}"
            await emit(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
            for start in range(0, len(args), 16):
                await emit(
                    {"tool_calls": [{"index": index, "function": {"arguments": args[start : start + 16]}}]}
                )
        await emit({}, "tool_calls" if reply.tool_calls else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            final = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": usage,
            }
            await response.write(f"data: {json.dumps(final)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        if reply.linger_after_done:
            await asyncio.sleep(reply.linger_after_done)
        await response.write_eof()
        entry["finished"] = time.monotonic()
        return response

    def _full(self, completion_id: str, model: str, reply: Reply, usage: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments),
                    },
                }
                for call in reply.tool_calls
            ]
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": usage,
        }
