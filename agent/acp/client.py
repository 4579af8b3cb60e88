"""One ``task`` run by a coding agent over ACP: start it in the sandbox, brief it, answer its requests.

The conversation (agentclientprotocol.com, protocol version 1): ``initialize`` (we offer reading and
writing text files, no terminal), ``session/new`` in the thread's workspace with no MCP servers,
``session/prompt`` with the brief, then ``session/update`` notifications while it works, until the
prompt's answer says why it stopped. What the agent asks of us goes through the same doors as the
service's own tools: ``session/request_permission`` becomes the chat's approval, and
``fs/read_text_file`` / ``fs/write_text_file`` go through the sandbox's path checks, so nothing outside
the thread's files is reachable. Stop or a time limit cancels this coroutine: the agent gets
``session/cancel`` and a moment to wind down, then its process and everything it started is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.acp.rpc import INVALID_PARAMS, METHOD_NOT_FOUND, Connection, ConnectionLost, Params, RpcError
from agent.sandbox import LiveProcess, Sandbox, SandboxError

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
#: How long a cancelled agent may take to answer its open prompt before it is killed.
CANCEL_GRACE_SECONDS = 2.0
#: The most a ``fs/read_text_file`` answer carries.
MAX_READ_CHARS = 1_000_000
#: A refusal of a file request outside the thread's files (JSON-RPC's "server error" range).
REFUSED = -32000
#: ``session/new`` (or a prompt) refused until the client runs one of the agent's ``authMethods``.
AUTH_REQUIRED = -32000

Ending = Literal["done", "failed", "stopped"]


@dataclass(slots=True)
class Hooks:
    """What the task lends the agent's session: its card, the chat's approval and secret masking."""

    #: A step on the task's card: ``(kind, text)``, kind ``tool`` or ``model``.
    step: Callable[[str, str], None]
    #: Ask the chat to approve ``(what, why)``; True when a person said yes.
    approve: Callable[[str, str], Awaitable[bool]]
    mask: Callable[[str], str]


@dataclass(slots=True)
class AcpResult:
    status: Ending
    text: str
    tool_calls: int = 0


@dataclass(slots=True)
class _Turn:
    """What the agent has said so far: its messages (split at tool calls) and its tool calls' titles."""

    messages: list[str] = field(default_factory=lambda: [""])
    titles: dict[str, str] = field(default_factory=dict)
    tool_calls: int = 0

    def last_message(self) -> str:
        return next((m.strip() for m in reversed(self.messages) if m.strip()), "")


class AcpTask:
    """The client's side of one ACP session with one agent process."""

    def __init__(
        self, sandbox: Sandbox, process: LiveProcess, hooks: Hooks, env_names: Sequence[str] = ()
    ) -> None:
        self.sandbox = sandbox
        #: The names of what ``acp.env`` gave it, for telling a person what to configure.
        self.env_names = list(env_names)
        #: The ``authMethods`` its ``initialize`` answer offered.
        self.auth_methods: list[str] = []
        self.process = process
        self.hooks = hooks
        self.turn = _Turn()
        self.session_id: str | None = None
        self.rpc = Connection(process.stdout, process.stdin, self._request, self._notification)

    async def run(self, brief: str) -> AcpResult:
        serving = asyncio.create_task(self.rpc.serve())
        prompt: asyncio.Task[Any] | None = None
        try:
            await self._start()
            prompt = asyncio.create_task(
                self.rpc.request(
                    "session/prompt",
                    {"sessionId": self.session_id, "prompt": [{"type": "text", "text": brief}]},
                )
            )
            answer = await asyncio.shield(prompt)
            return self._ended(answer)
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel(prompt))
            raise
        except RpcError as exc:
            if self.session_id is None and self.auth_methods and exc.code == AUTH_REQUIRED:
                return self._failed(self._sign_in_needed(exc))
            return self._failed(f"the coding agent answered with an error: {exc.message} ({exc.code})")
        except ConnectionLost:
            await _settle(self.process)
            code = self.process.returncode
            why = f"the coding agent ended before it finished (exit code {code})"
            if said := self.process.said():
                why += f": {self.hooks.mask(said)[:300]}"
            return self._failed(why)
        finally:
            if prompt is not None and not prompt.done():
                prompt.cancel()
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving

    async def _start(self) -> None:
        hello = await self.rpc.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": True, "writeTextFile": True},
                    "terminal": False,
                },
                "clientInfo": {"name": "switchboard", "version": "1"},
            },
        )
        version = hello.get("protocolVersion") if isinstance(hello, dict) else None
        methods = hello.get("authMethods") if isinstance(hello, dict) else None
        self.auth_methods = [
            str(m.get("name") or m.get("id")) for m in methods or [] if isinstance(m, dict) and m.get("id")
        ]
        if version != PROTOCOL_VERSION:
            raise RpcError(
                0, f"it speaks ACP protocol version {version!r}; this service speaks {PROTOCOL_VERSION}"
            )
        session = await self.rpc.request("session/new", {"cwd": self.sandbox.agent_cwd(), "mcpServers": []})
        session_id = session.get("sessionId") if isinstance(session, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise RpcError(0, "session/new gave no sessionId")
        self.session_id = session_id

    def _sign_in_needed(self, exc: RpcError) -> str:
        """``session/new`` wants a sign-in: say which of its methods, and what ``acp.env`` passed."""
        given = (
            f"acp.env gives it {', '.join(self.env_names)}; check those values"
            if self.env_names
            else "acp.env gives it nothing"
        )
        return (
            f"the coding agent needs to be signed in ({self.hooks.mask(exc.message)}; it offers: "
            f"{', '.join(self.auth_methods)}). A chat cannot sign it in: give it its API key in the "
            f"profile's acp.env (e.g. ANTHROPIC_API_KEY: ${{ANTHROPIC_API_KEY}}); {given}"
        )

    async def _cancel(self, prompt: asyncio.Task[Any] | None) -> None:
        """``session/cancel``, then a moment for the agent to answer its prompt with ``cancelled``."""
        if self.session_id is None or prompt is None or prompt.done():
            return
        with contextlib.suppress(ConnectionLost):
            await self.rpc.notify("session/cancel", {"sessionId": self.session_id})
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(prompt), CANCEL_GRACE_SECONDS)

    def _ended(self, answer: Any) -> AcpResult:
        self._close_message()
        reason = answer.get("stopReason") if isinstance(answer, dict) else None
        text = self.hooks.mask(self.turn.last_message())
        if reason == "end_turn":
            return AcpResult(
                "done", text or "(the coding agent finished without a word)", self.turn.tool_calls
            )
        if reason == "cancelled":
            return AcpResult("stopped", _with_last("stopped: the coding agent was cancelled", text))
        return self._failed(f"the coding agent stopped early: {reason or 'no stop reason given'}")

    def _failed(self, why: str) -> AcpResult:
        return AcpResult(
            "failed",
            self.hooks.mask(_with_last(why, self.turn.last_message())),
            self.turn.tool_calls,
        )

    # --- what the agent tells us -----------------------------------------------------------------------
    def _notification(self, method: str, params: Params) -> None:
        if method != "session/update" or params.get("sessionId") != self.session_id:
            return
        update = params.get("update")
        if not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content")
            if isinstance(content, dict) and content.get("type") == "text":
                self.turn.messages[-1] += str(content.get("text", ""))
        elif kind == "tool_call":
            self._close_message()
            self.turn.tool_calls += 1
            call_id = str(update.get("toolCallId", ""))
            title = str(update.get("title") or update.get("kind") or "a tool")
            self.turn.titles[call_id] = title
            self.hooks.step("tool", self.hooks.mask(title))
        elif kind == "tool_call_update":
            status = update.get("status")
            call_id = str(update.get("toolCallId", ""))
            title = str(update.get("title") or self.turn.titles.get(call_id) or "a tool")
            self.turn.titles[call_id] = title
            if status in ("completed", "failed"):
                self.hooks.step("tool", self.hooks.mask(f"{title}: {status}"))

    def _close_message(self) -> None:
        """A message ends where a tool call starts; it goes on the card as what the agent said."""
        if text := self.turn.messages[-1].strip():
            self.hooks.step("model", self.hooks.mask(text))
            self.turn.messages.append("")

    # --- what the agent asks of us -----------------------------------------------------------------------
    async def _request(self, method: str, params: Params) -> Any:
        if self.session_id is None or params.get("sessionId") != self.session_id:
            raise RpcError(INVALID_PARAMS, "unknown sessionId")
        if method == "session/request_permission":
            return await self._permission(params)
        if method == "fs/read_text_file":
            return await self._read(params)
        if method == "fs/write_text_file":
            return await self._write(params)
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    async def _permission(self, params: Params) -> dict[str, Any]:
        call = params.get("toolCall")
        options = params.get("options")
        if not isinstance(call, dict) or not isinstance(options, list) or not options:
            raise RpcError(INVALID_PARAMS, "toolCall and options are required")
        call_id = str(call.get("toolCallId", ""))
        title = str(call.get("title") or self.turn.titles.get(call_id) or "a tool call")
        detail = call.get("rawInput")
        what = title if detail is None else f"{title}: {json.dumps(detail, ensure_ascii=False)[:300]}"
        try:
            approved = await self.hooks.approve(
                self.hooks.mask(self.sandbox.from_agent_path(what)),
                "the coding agent asks permission for this tool call",
            )
        except asyncio.CancelledError:
            return {"outcome": {"outcome": "cancelled"}}
        wanted = ("allow_once",) if approved else ("reject_once", "reject_always")
        chosen = _option(options, wanted)
        if chosen is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": chosen}}

    def _inside(self, params: Params) -> str:
        path = params.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            raise RpcError(INVALID_PARAMS, "path must be an absolute path")
        return self.sandbox.from_agent_path(path)

    async def _read(self, params: Params) -> dict[str, Any]:
        path = self._inside(params)
        try:
            text, _cut = await self.sandbox.read_text(path, MAX_READ_CHARS)
        except SandboxError as exc:
            raise RpcError(REFUSED, str(exc)) from None
        line, limit = params.get("line"), params.get("limit")
        if isinstance(line, int) or isinstance(limit, int):
            lines = text.splitlines(keepends=True)
            start = max(line - 1, 0) if isinstance(line, int) else 0
            end = start + limit if isinstance(limit, int) else None
            text = "".join(lines[start:end])
        return {"content": text}

    async def _write(self, params: Params) -> dict[str, Any]:
        path = self._inside(params)
        content = params.get("content")
        if not isinstance(content, str):
            raise RpcError(INVALID_PARAMS, "content must be a string")
        try:
            await self.sandbox.write_text(path, content)
        except SandboxError as exc:
            raise RpcError(REFUSED, str(exc)) from None
        self.hooks.step("tool", f"wrote {path}")
        return {}


async def run_acp(
    sandbox: Sandbox,
    command: Sequence[str],
    brief: str,
    hooks: Hooks,
    *,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[str] = (),
) -> AcpResult:
    """Run ``command`` in ``sandbox`` as an ACP agent on ``brief``; its process never outlives this call.

    ``env`` (its API key) goes to the agent's process alone; ``mounts`` are host paths it may read.
    """
    process = await sandbox.start_process(command, env=env, mounts=mounts)
    try:
        return await AcpTask(sandbox, process, hooks, sorted(env or {})).run(brief)
    finally:
        await asyncio.shield(process.close())


def _option(options: list[Any], kinds: Sequence[str]) -> str | None:
    """The id of the first offered option of the first of ``kinds`` (never an "always" for a yes)."""
    for kind in kinds:
        for option in options:
            if (
                isinstance(option, dict)
                and option.get("kind") == kind
                and isinstance(option.get("optionId"), str)
            ):
                return str(option["optionId"])
    return None


def _with_last(why: str, text: str) -> str:
    return f"{why}\nWhat it had said last: {text}" if text else why


async def _settle(process: LiveProcess) -> None:
    """Give an agent whose output ended a moment to exit, so its exit code can be reported."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(process.exited), 1.0)
