"""Feishu / Lark: the long connection over lark-oapi, messages and CardKit cards.

The channel itself is ``channel.py``; the other modules are its transport, formatting and intake.

The SDK is imported here, before any module of this package imports it, by :func:`import_sdk`:
``lark_oapi.ws.client`` takes "the current event loop" as it is imported and, when there is none,
makes one and installs it as the thread's loop. Nothing ever closes that loop (the channel runs the SDK
on a loop of its own, ``FeishuChannel._run_ws``), so an import outside a running loop — the CLI's
check for missing extras, a test collection — kept an event loop (its selector and self-pipe) open for
the life of the process, reported as "unclosed event loop" when it was finally collected.
"""

from __future__ import annotations

import asyncio
import sys


async def _load_sdk() -> None:
    import lark_oapi  # noqa: F401  (imported for its side effect on the running loop: it takes it)


def import_sdk() -> None:
    """Import lark-oapi so that its import-time event loop is one that is closed again at once.

    Inside a running loop the SDK takes that loop and nothing is left behind; outside one it is
    imported inside a short-lived loop of our own (the running one, so the SDK makes none), closed
    right after. The thread's current loop is left as it was.
    """
    if "lark_oapi" in sys.modules:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        import lark_oapi  # noqa: F401

        return
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_load_sdk())
    finally:
        loop.close()


import_sdk()
