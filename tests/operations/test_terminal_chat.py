"""``switchboard chat`` as a person uses it (a pseudo-terminal) and as a script uses it (a pipe)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.foundation.test_cli import cli_env, config_for

pytestmark = pytest.mark.slow

LEFT = "\x1b[D"
LONG = "".join(chr(ord("a") + i % 26) for i in range(7000))


class Terminal:
    """A child process on a pty, with everything it writes collected in the background."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            command, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True, start_new_session=True
        )
        os.close(slave)
        self.output = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.output += data

    def type(self, text: str) -> None:
        data = text.encode()
        while data:
            written = os.write(self.master, data[:1024])
            data = data[written:]

    def wait_for(self, predicate, what: str, timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; output so far: {self.output[-2000:]!r}")


def user_messages(llm: FakeOpenAI) -> list[str]:
    """What the person typed, as the model got it (memory extraction, flushed at exit, also asks it)."""
    from agent.memory import EXTRACTION_MARKER

    chats = [
        r
        for r in llm.completions
        if not any(EXTRACTION_MARKER in str(m.get("content")) for m in r["messages"])
    ]
    return [m["content"] for req in chats for m in req["messages"] if m["role"] == "user"]


def test_arrows_edit_the_line_and_a_long_paste_arrives_whole(tmp_path: Path, llm: FakeOpenAI) -> None:
    env = cli_env(TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    term = Terminal(
        [sys.executable, "-m", "bot", "chat", "--config", str(config_for(tmp_path, llm.base_url))], env
    )
    try:
        term.wait_for(lambda: b"you>" in term.output, "the prompt")
        term.type("hllo" + LEFT * 3 + "e\r")  # the typo fixed with the arrow keys
        term.wait_for(lambda: len(llm.completions) >= 1 and b"echo: hello" in term.output, "the first reply")
        assert user_messages(llm) == ["hello"]

        llm.script(Reply(text="got it"))
        # Typed-ahead text before the editor is back would meet the kernel's line discipline instead.
        term.wait_for(lambda: b"you>" in term.output.split(b"echo: hello", 1)[1], "the next prompt")
        term.type(f"\x1b[200~{LONG}\x1b[201~\r")  # a paste, as a terminal with bracketed paste sends it
        term.wait_for(
            lambda: len(llm.completions) >= 2 and b"got it" in term.output, "the reply to the paste"
        )
        assert user_messages(llm)[-1] == LONG

        term.type("/quit\r")
        term.proc.wait(60)
        assert term.proc.returncode == 0
        # The conversation is not interleaved with log lines.
        assert b'"level"' not in term.output and b"INFO" not in term.output
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait(10)
        os.close(term.master)


def test_piped_long_line_help_lists_quit_and_all_failed_exits_nonzero(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    command = [sys.executable, "-m", "bot", "chat", "--config", str(config_for(tmp_path, llm.base_url))]
    ok = subprocess.run(
        command, input=f"{LONG}\n/help\n", capture_output=True, text=True, timeout=120, env=cli_env()
    )
    assert ok.returncode == 0, ok.stderr
    assert user_messages(llm) == [LONG]
    assert f"echo: {LONG}" in ok.stdout
    assert "/quit — leave the chat" in ok.stdout
    assert ok.stderr == ""  # INFO lines stay off the terminal

    broken = tmp_path / "broken"
    broken.mkdir()
    bad_command = [
        sys.executable,
        "-m",
        "bot",
        "chat",
        "--config",
        str(config_for(broken, "http://127.0.0.1:9/v1")),
    ]
    bad = subprocess.run(
        bad_command, input="one\ntwo\n", capture_output=True, text=True, timeout=120, env=cli_env()
    )
    assert bad.returncode == 1
    assert bad.stdout.count("⚠️") == 2
    assert "every reply failed" in bad.stderr


def test_stop_typed_or_ctrl_c_while_a_reply_streams_stops_it_and_the_chat_goes_on(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    story = " ".join(f"word{i}" for i in range(400))  # ~40 s at this pace: it cannot finish by itself
    llm.script(Reply(text=story, chunk_size=10, delay=0.1), Reply(text=story, chunk_size=10, delay=0.1))
    env = cli_env(TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    term = Terminal(
        [sys.executable, "-m", "bot", "chat", "--config", str(config_for(tmp_path, llm.base_url))], env
    )
    try:
        term.wait_for(lambda: b"you>" in term.output, "the prompt")
        term.type("tell me a story\r")
        term.wait_for(lambda: b"word20 " in term.output, "the reply streaming")
        term.type("/stop\r")
        term.wait_for(lambda: "⏹ Stopped.".encode() in term.output, "the reply to stop")
        first = term.output.decode(errors="replace")
        assert "word399" not in first
        term.wait_for(lambda: b"you>" in term.output.split("⏹ Stopped.".encode(), 1)[1], "the next prompt")

        term.type("another one\r")
        term.wait_for(lambda: term.output.count(b"word20 ") >= 2, "the second reply streaming")
        term.type("after")  # typed during the stream, no Enter: kept for the next line
        term.type("\x03")  # Ctrl-C stops this reply, not the chat
        term.wait_for(lambda: term.output.count("⏹ Stopped.".encode()) >= 2, "Ctrl-C to stop the reply")
        assert term.proc.poll() is None
        term.wait_for(lambda: b"you>" in term.output.rsplit("⏹ Stopped.".encode(), 1)[1], "the prompt again")
        term.type("\r")
        term.wait_for(lambda: user_messages(llm)[-1:] == ["after"], "the typed-ahead line sent")
        assert "word399" not in term.output.decode(errors="replace")

        term.type("/quit\r")
        term.proc.wait(60)
        assert term.proc.returncode == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait(10)
        os.close(term.master)
