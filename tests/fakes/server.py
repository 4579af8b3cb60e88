"""A base for fake platform servers: a real aiohttp server on 127.0.0.1 in its own thread and loop.

Running in a thread lets the same fake serve async tests, blocking SDKs (lark, dingtalk) and
subprocesses (``switchboard chat``/``serve``) alike. Subclasses add routes in :meth:`setup_routes` and
record what they receive in ``self.requests``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any

from aiohttp import web


class ThreadedServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._redeliveries: set[asyncio.Task[None]] = set()

    # subclasses -------------------------------------------------------------------------------
    def setup_routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)

    # lifecycle --------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ThreadedServer:
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake server did not start")
        if self._error:
            raise self._error
        return self

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced to start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
        self._loop.close()

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.setup_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (sync or returning a coroutine) on the server's loop and return its result."""
        assert self._loop is not None

        async def wrapper() -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        future: Future[Any] = asyncio.run_coroutine_threadsafe(wrapper(), self._loop)
        return future.result(10)

    def redeliver(self, loop_until_confirmed: Coroutine[Any, Any, None]) -> None:
        """Run a platform's redelivery loop (push again until the bot confirms) on the server's loop.

        Call from the server's loop. The loops are kept here so :attr:`retrying` can count them and
        :meth:`stop` cancels them instead of leaving pending tasks behind.
        """
        task = asyncio.get_running_loop().create_task(loop_until_confirmed)
        self._redeliveries.add(task)
        task.add_done_callback(self._redeliveries.discard)

    def open_connections(self) -> int:
        """TCP connections the server holds open now: a client pool nobody closed stays counted here."""
        assert self._runner is not None and self._runner.server is not None
        server = self._runner.server
        return int(self.call(lambda: len(server.connections)))

    @property
    def retrying(self) -> int:
        """Deliveries still waiting for the bot's confirmation (and pushed again if none comes)."""
        return len(self._redeliveries)

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            if self._redeliveries:

                async def cancel() -> None:
                    tasks = list(self._redeliveries)
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)

                self.call(cancel)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
