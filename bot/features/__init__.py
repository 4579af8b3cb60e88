"""Optional subsystems plug into the service here, one module each, so adding one edits no shared file.

A module defines ``FEATURE``: an object with any of ``tables()``, ``routers(service)``,
``async start(service)`` and ``async stop(service)``. ``start`` runs after the database, agent and manager
exist and before channels connect, so a feature can install an identity resolver, add after-turn hooks or
status lines to the manager, or add channels.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any


class Feature:
    """Base with no-op defaults; subclass and override what you need."""

    name = "feature"

    def tables(self) -> list[Any]:
        return []

    def routers(self, service: Any) -> list[Any]:
        return []

    async def start(self, service: Any) -> None:
        return None

    async def stop(self, service: Any) -> None:
        return None


def discover() -> list[Feature]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        feature = getattr(module, "FEATURE", None)
        if feature is not None:
            found.append(feature)
    return found
