"""Issue 18 (scheduled tasks): a schedule survives kill -9 between creation and firing, and fires once."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.slow  # real `switchboard chat` processes


def config_for(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"data_dir: {tmp_path / 'data'}\n"
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}'}}\n"
        f"models: [{{name: default, model: fake-model, api_key: sk-fake, base_url: '{base_url}', max_retries: 0}}]\n"
        "memory: {enabled: false}\n"
    )
    return path


class Chat:
    """`switchboard chat` with its input kept open (end of input would end the process)."""

    def __init__(self, config: Path) -> None:
        env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "--log-level", "WARNING", "chat", "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.output = b""

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, needle: str, timeout: float = 90) -> str:
        assert self.proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while needle.encode() not in self.output:
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} never appeared in: {self.output.decode()[-500:]}")
            if selector.select(0.2):
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError(f"chat exited before {needle!r}: {self.output.decode()[-500:]}")
                self.output += chunk
        return self.output.decode()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def close(self) -> str:
        """End of input: the chat finishes what it accepted and exits."""
        rest, _ = self.proc.communicate(timeout=60)
        self.output += rest
        return self.output.decode()


def test_a_schedule_made_before_kill_9_fires_once_after_restart(tmp_path: Path, llm: FakeOpenAI) -> None:
    config = config_for(tmp_path, llm.base_url)
    first = Chat(config)
    try:
        first.say("/schedule in 4s ping the team")
        first.wait_for("⏰ Scheduled ")
    finally:
        first.kill()  # before the schedule is due: nothing of it may depend on this process
    assert not any("ping the team" in str(r) for r in llm.completions)
    second = Chat(config)
    try:
        second.wait_for("echo: ping the team")
        time.sleep(1)  # a second firing would show up now
    finally:
        output = second.close()
    assert output.count("echo: ping the team") == 1
    asked = [r for r in llm.completions if any(m.get("content") == "ping the team" for m in r["messages"])]
    assert len(asked) == 1
