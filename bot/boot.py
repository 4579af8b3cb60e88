"""What ``switchboard serve`` answers with before the service exists: /health in well under a second.

FastAPI, SQLAlchemy, the service's modules and the channel SDKs take one to two seconds to import, and
opening the database takes more; a supervisor or a liveness probe should not see "connection refused"
meanwhile. So uvicorn serves :class:`Booting` first, an ASGI app built from the standard library only.
Its lifespan returns at once (uvicorn opens the socket), and a background task runs ``build``: the
imports, the pre-flight checks, the real app and its lifespan (``Service.open``). Until then

- ``/health`` answers 200 with ``"status": "starting"`` (the process is alive; nothing is claimed about
  the database or the channels: they say ``"starting"``),
- ``/ready`` answers 503 ``"starting: the database is not open yet"``,
- every other request waits for the real app and is then served by it (a webhook delivery that arrives
  early is stored like any other), or gets 503 if start-up failed.

From then on every request goes to the real app, /health and /ready included. A failed build is handed
to ``on_failed`` (``serve`` prints the reason and exits); shutdown waits for a build under way, as uvicorn
waits for a lifespan start-up, then closes what the build opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger("switchboard")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: ``build(stack)`` returns the real app; what it opens (the app's lifespan) goes on ``stack``.
Build = Callable[[contextlib.AsyncExitStack], Awaitable[ASGIApp]]

NOT_READY = {"ready": False, "reason": "starting: the database is not open yet"}


class BootCancelled(Exception):
    """Raised by a build that saw :attr:`Booting.stopping` and gave up before opening anything."""


class Booting:
    """The ASGI app uvicorn serves from its first moment; hands over to the real app once built."""

    def __init__(
        self,
        build: Build,
        *,
        starting_health: dict[str, Any],
        on_failed: Callable[[BaseException], None],
    ) -> None:
        self._build = build
        self._starting_health = starting_health
        self._on_failed = on_failed
        self._app: ASGIApp | None = None
        self._failed = False
        self._done = asyncio.Event()
        self._stack = contextlib.AsyncExitStack()
        self._task: asyncio.Task[None] | None = None
        self.stopping = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self._app is not None:
            await self._app(scope, receive, send)
            return
        probe = scope["type"] == "http" and scope["method"] == "GET"  # other methods: the app's 405
        if probe and scope["path"] == "/health":
            body = dict(self._starting_health, status="failed" if self._failed else "starting")
            await _json(send, 503 if self._failed else 200, body)
            return
        if probe and scope["path"] == "/ready":
            await _json(send, 503, NOT_READY)
            return
        await self._done.wait()
        if self._app is not None:
            await self._app(scope, receive, send)
        elif scope["type"] == "http":
            await _json(send, 503, {"detail": "the service could not be started"})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._task = asyncio.create_task(self._run_build(), name="switchboard-boot")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.stopping = True
                if self._task is not None:
                    await asyncio.wait([self._task])
                try:
                    await self._stack.aclose()
                except Exception as exc:
                    log.exception("shutdown did not finish cleanly")
                    await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _run_build(self) -> None:
        try:
            self._app = await self._build(self._stack)
        except BootCancelled:
            pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit from a pre-flight check included: serve exits with it
            self._failed = True
            self._on_failed(exc)
        finally:
            self._done.set()


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
