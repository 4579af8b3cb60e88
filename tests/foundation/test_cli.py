"""The README's commands: ``switchboard serve`` answers /health; ``switchboard chat`` round-trips."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_for(tmp_path: Path, base_url: str, port: int = 8001) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"server: {{port: {port}}}\n"
        f"data_dir: {tmp_path / 'data'}\n"
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}'}}\n"
        f"models: [{{name: default, model: fake-model, api_key: $FAKE_KEY, base_url: '{base_url}', max_retries: 0}}]\n"
    )
    return path


def chat_requests(llm) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    """Chat turns only: memory extraction (on by default) also asks the model, at the latest at exit."""
    from agent.memory import EXTRACTION_MARKER

    return [
        b
        for b in llm.completions
        if not any(EXTRACTION_MARKER in str(m.get("content")) for m in b["messages"])
    ]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    env.update(FAKE_KEY="sk-fake-cli", **extra)
    return env


def test_serve_on_the_embedded_defaults_answers_health(tmp_path):
    # No config file at all: run in an empty directory, as a new user would.
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        body = None
        for _ in range(150):
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
            except httpx.HTTPError:
                body = None
            if body is not None and body["status"] != "starting":  # answered before the service opened
                break
            time.sleep(0.1)
        assert body is not None, "serve did not come up"
        assert body["status"] == "ok" and body["database"] == "ok"
        assert (tmp_path / "data" / "switchboard.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0].decode()
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells the supervisor why.
    assert proc.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert "Traceback" not in output


def test_chat_reads_one_message_per_line_prints_each_reply_and_exits(tmp_path, llm):
    llm.script(Reply(text="Hi! I'm here."))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            "--log-level",
            "WARNING",
            "chat",
            "--config",
            str(config_for(tmp_path, llm.base_url)),
        ],
        input="hello\n/help\nwhat did I say first?\n",
        capture_output=True,
        text=True,
        timeout=90,
        env=cli_env(),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == "Hi! I'm here."
    assert "Commands:" in result.stdout and "/models [name] — " in result.stdout
    assert result.stdout.rstrip().endswith("echo: what did I say first?")
    # The model saw the conversation so far, and the real key from the environment. (The last request
    # is memory extraction, flushed when the process stops.)
    assert [m["content"] for m in chat_requests(llm)[-1]["messages"] if m["role"] != "system"] == [
        "hello",
        "Hi! I'm here.",
        "what did I say first?",
    ]
    assert llm.api_key_seen[-1] == "Bearer sk-fake-cli"


def test_a_message_accepted_before_a_hard_kill_is_answered_after_restart(tmp_path, llm):
    llm.script(Reply(text="slow " * 100, chunk_size=5, delay=0.2))
    config = config_for(tmp_path, llm.base_url)
    command = [sys.executable, "-m", "bot", "--log-level", "WARNING", "chat", "--config", str(config)]
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env()
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"the question\n")
        proc.stdin.flush()
        for _ in range(1200):  # a cold process imports the model SDK first: allow a minute on a busy machine
            if llm.completions:
                break
            time.sleep(0.05)
        assert llm.completions, "the model was never asked"
    finally:
        proc.kill()  # SIGKILL: no cleanup at all
        proc.wait(10)
    again = subprocess.run(command, input="", capture_output=True, text=True, timeout=90, env=cli_env())
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "echo: the question"
    assert len(chat_requests(llm)) == 2


def test_doctor_says_what_is_fine_and_what_to_fix(tmp_path, llm):
    good = subprocess.run(
        [sys.executable, "-m", "bot", "doctor", "--config", str(config_for(tmp_path, llm.base_url))],
        capture_output=True,
        text=True,
        timeout=90,
        env=cli_env(),
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert "✓ database: reachable" in good.stdout
    assert "✓ model default: agent.chat_completions:ChatCompletions (fake-model) configured" in good.stdout

    broken = tmp_path / "broken"
    broken.mkdir()
    path = config_for(broken, "http://127.0.0.1:9/v1")
    path.write_text(
        path.read_text().replace("$FAKE_KEY", "$MISSING_KEY")
        + "channels: {telegram: {enabled: true, bot_token: $NO_TOKEN}}\n"
    )
    bad = subprocess.run(
        [sys.executable, "-m", "bot", "doctor", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=90,
        env=cli_env(),
    )
    assert bad.returncode == 1
    assert "✗ config: not usable" in bad.stdout
    assert "channels.telegram.bot_token: required because channels.telegram.enabled is true" in bad.stdout
