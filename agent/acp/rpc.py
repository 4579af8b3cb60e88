"""JSON-RPC 2.0 over newline-delimited stdio, both ways: what ACP carries (agentclientprotocol.com,
"Transports": one JSON object per line, UTF-8, no embedded newlines).

Why not a library: both directions are a few dozen lines, and an ACP session is requests *and* requests
back (the agent asks us for permission and files while our ``session/prompt`` is still open), which is
simplest with one reader that routes answers to waiting futures and runs incoming requests as tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

#: JSON-RPC 2.0's own error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

Params = dict[str, Any]
#: Answers one request from the other side: its result, or :class:`RpcError`.
RequestHandler = Callable[[str, Params], Awaitable[Any]]
NotificationHandler = Callable[[str, Params], None]


class RpcError(Exception):
    """An error answer (ours to send, or the other side's to us)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ConnectionLost(Exception):
    """The other side's output ended (it exited, or wrote something that is not a protocol line)."""


class Connection:
    """One JSON-RPC peer on a reader and a writer. :meth:`serve` must run for answers to arrive."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.on_request = on_request
        self.on_notification = on_notification
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._handling: set[asyncio.Task[None]] = set()
        self.lost: str | None = None

    async def request(self, method: str, params: Params) -> Any:
        if self.lost is not None:
            raise ConnectionLost(self.lost)
        self._next_id += 1
        ident = self._next_id
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = answer
        try:
            await self._write({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
            return await answer
        finally:
            self._waiting.pop(ident, None)

    async def notify(self, method: str, params: Params) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def _write(self, message: dict[str, Any]) -> None:
        try:
            self.writer.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
            await self.writer.drain()
        except (ConnectionError, RuntimeError) as exc:  # its stdin closed: it has exited
            self._lose(f"the agent's input closed ({type(exc).__name__})")
            raise ConnectionLost(self.lost or "") from None

    async def serve(self) -> None:
        """Read until the other side's output ends; then every waiting request fails."""
        try:
            while True:
                try:
                    line = await self.reader.readline()
                except ValueError:
                    self._lose("the agent wrote a line longer than the limit")
                    return
                if not line:
                    self._lose("the agent's output ended")
                    return
                self._receive(line)
        finally:
            self._lose("the agent's output ended")
            for task in list(self._handling):
                task.cancel()

    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(ConnectionLost(self.lost))

    def _receive(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.debug("acp: skipped a line that is not JSON")
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self._reply_error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
            return
        method = message.get("method")
        if isinstance(method, str):
            params = message.get("params", {})
            if not isinstance(params, dict):
                if "id" in message:
                    self._reply_error(message["id"], INVALID_PARAMS, "params must be an object")
                return
            if "id" in message:
                task = asyncio.get_running_loop().create_task(self._answer(message["id"], method, params))
                self._handling.add(task)
                task.add_done_callback(self._handling.discard)
            else:
                try:
                    self.on_notification(method, params)
                except Exception:
                    log.exception("acp: handling %s failed", method)
            return
        ident = message.get("id")
        answer = self._waiting.get(ident) if isinstance(ident, int) else None
        if answer is None or answer.done():
            return
        if "error" in message:
            error = message["error"] if isinstance(message["error"], dict) else {}
            answer.set_exception(RpcError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message"))))
        else:
            answer.set_result(message.get("result"))

    async def _answer(self, ident: Any, method: str, params: Params) -> None:
        try:
            result = await self.on_request(method, params)
        except RpcError as exc:
            self._reply_error(ident, exc.code, exc.message)
            return
        except asyncio.CancelledError:
            self._reply_error(ident, INTERNAL_ERROR, "the client is shutting down")
            raise
        except Exception as exc:
            log.exception("acp: answering %s failed", method)
            self._reply_error(ident, INTERNAL_ERROR, type(exc).__name__)
            return
        with contextlib.suppress(ConnectionLost):
            await self._write({"jsonrpc": "2.0", "id": ident, "result": result})

    def _reply_error(self, ident: Any, code: int, message: str) -> None:
        data = {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.writer.write(json.dumps(data).encode() + b"\n")
