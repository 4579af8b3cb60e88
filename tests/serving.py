"""A real app under uvicorn on a real 127.0.0.1 socket, in the test's own event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


def bound_socket() -> socket.socket:
    """A socket bound to a free 127.0.0.1 port: bind first when the URL must be known before the app
    is built (a public URL in its settings)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def base_url(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


@asynccontextmanager
async def serving(app: Any, sock: socket.socket | None = None) -> AsyncIterator[str]:
    """Run ``app`` (lifespan included) until the block ends; yield its base URL."""
    sock = sock or bound_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(30):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        yield base_url(sock)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()
