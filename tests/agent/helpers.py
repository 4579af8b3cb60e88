"""Shared bits for the agent tests: settings with memory on/off, process liveness, tool results."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI


def agent_settings(tmp_path: Path, llm: FakeOpenAI, *, remember: bool = False, **overrides: Any):  # type: ignore[no-untyped-def]
    """Test settings; memory extraction (an extra model call per turn) only when ``remember``."""
    overrides.setdefault("memory", {"enabled": remember, "debounce_seconds": 0})
    return make_settings(tmp_path, llm, **overrides)


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results the model was sent in one request."""
    return [str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "tool"]


def all_tool_results(llm: FakeOpenAI) -> list[str]:
    seen: list[str] = []
    for body in llm.completions:
        for text in tool_results(body):
            if text not in seen:
                seen.append(text)
    return seen


def system_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")


def alive(pid: int) -> bool:
    """Running (zombies count as dead: nothing is executing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}


async def wait_until(predicate, timeout: float = 15.0, interval: float = 0.05) -> None:  # type: ignore[no-untyped-def]
    async def loop() -> None:
        while not predicate():
            await asyncio.sleep(interval)

    await asyncio.wait_for(loop(), timeout)


def everything_shown(channel) -> list[str]:  # type: ignore[no-untyped-def]
    return [text for message in channel.messages.values() for text in message.history]
