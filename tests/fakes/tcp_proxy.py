"""A TCP proxy that can stall: the network edge between a service and its database, for outage tests.

A database that is slow under load looks, from the service, like queries that take a long time to
answer; a frozen host or a lost route looks the same until the kernel gives up. :meth:`StallingProxy.stall`
reproduces that without touching the database: the proxy keeps every connection open and accepts new
ones, but forwards no byte in either direction until :meth:`StallingProxy.resume`, which sends what was
held back, in order. Nothing is dropped, so the database and the service see exactly what a slow
network shows them (including asyncpg's cancel requests, which travel over a new connection).

It runs in its own thread and event loop, so it serves in-process services and subprocesses alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

CHUNK = 65536


class StallingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``; ``stall()`` holds all traffic."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._flowing: asyncio.Event | None = None  # set while bytes may pass
        self._stop: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # --- control (any thread) -------------------------------------------------------------------------
    def stall(self) -> None:
        """From now on no byte passes (connections stay open, new ones are accepted)."""
        self._call(lambda flowing: flowing.clear())

    def resume(self) -> None:
        """Let traffic through again, starting with what was held back."""
        self._call(lambda flowing: flowing.set())

    def _call(self, change: object) -> None:
        assert self._loop is not None and self._flowing is not None
        flowing = self._flowing
        done = threading.Event()

        def apply() -> None:
            change(flowing)  # type: ignore[operator]
            done.set()

        self._loop.call_soon_threadsafe(apply)
        done.wait(5)

    # --- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> StallingProxy:
        self._thread = threading.Thread(target=self._run, name="StallingProxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for writer in list(self._writers):
                writer.close()

    async def _connection(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            client_w.close()
            return
        self._writers.update((client_w, server_w))
        try:
            await asyncio.gather(self._pipe(client_r, server_w), self._pipe(server_r, client_w))
        finally:
            for writer in (client_w, server_w):
                self._writers.discard(writer)
                writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                await self._flowing.wait()
                data = await reader.read(CHUNK)
                await self._flowing.wait()  # read while flowing, then stalled: hold it back
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()
