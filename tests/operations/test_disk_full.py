"""A real full disk under a real ``python -m bot serve``: the data directory is a small tmpfs that the
test fills while a turn runs (bot/diskcheck.py, bot/faults.py).

The service must say so — ``/ready`` 503 with the reason, ``/health``'s ``disk``, and
``switchboard_component_up{component="disk"} 0`` — show the user one "I'll retry" line instead of an
error, and answer the turn in that same message once space returns.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.reliability_telegram import ServeProcess, answer_for, wait_for, write_config
from bot.diskcheck import disk_check
from bot.faults import DISK_FULL_NOTE
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.fakes.telegram import FakeTelegram

BOT_USERNAME = "switchboard_bot"
CHAT = 701


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "48m") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``; skips the test when this process may not mount one."""
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (this test fills a real disk)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write a file until the disk is full; returns it (unlink it to give the space back)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"x" * size)
    finally:
        os.close(fd)
    return filler


def slow_answer(request: dict[str, Any]) -> Reply:
    """Long enough (about 2 s) for the test to fill the disk while the model is still answering."""
    return Reply(text=answer_for(last_user_text(request).strip()), chunk_size=2, delay=0.05)


def ready(port: int) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5)


def disk_up(port: int) -> str:
    lines = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines()
    return next(line for line in lines if line.startswith('switchboard_component_up{component="disk"}'))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_full_data_disk_fails_ready_with_the_reason_and_its_turn_is_answered_once_space_returns(
    tmp_path: Path,
):
    with (
        small_tmpfs(tmp_path / "disk") as disk,
        FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg,
        FakeOpenAI(slow_answer) as llm,
    ):
        config = write_config(disk, tg, llm)  # type: ignore[arg-type]
        log = tmp_path / "serve.log"  # not on the small disk
        service = ServeProcess(config, log)
        try:
            assert wait_for(lambda: tg.calls("getUpdates"), timeout=60), log.read_text()[-3000:]  # type: ignore[attr-defined]
            assert wait_for(lambda: ready(service.port).status_code == 200, timeout=60)
            tg.user_message(CHAT, "before", user_id=CHAT)  # type: ignore[attr-defined]
            assert wait_for(lambda: answer_for("before") in tg.bot_texts(CHAT), timeout=60)  # type: ignore[attr-defined]

            tg.user_message(CHAT, "during", user_id=CHAT)  # type: ignore[attr-defined]
            assert wait_for(lambda: len(tg.bot_messages(CHAT)) == 2, timeout=30), "its turn started"  # type: ignore[attr-defined]
            filler = fill(disk)  # the model is still answering: its result cannot be stored

            # /ready says why (its check is cached for up to 2 s), and so do /health and /metrics.
            assert wait_for(lambda: ready(service.port).status_code == 503, timeout=10)
            reason = ready(service.port).json()["reason"]
            assert reason.startswith("disk not writable: No space left on device"), reason
            health = httpx.get(f"http://127.0.0.1:{service.port}/health", timeout=5).json()
            assert health["disk"].startswith("not writable") and health["status"] == "degraded", health
            assert disk_up(service.port).endswith(" 0.0")

            # The user sees one "I'll retry" line, not an error.
            shown = wait_for(lambda: DISK_FULL_NOTE in tg.bot_messages(CHAT)[1].text, timeout=30)  # type: ignore[attr-defined]
            assert shown, tg.bot_texts(CHAT)  # type: ignore[attr-defined]
            asked = len(llm.completions)  # type: ignore[attr-defined]

            filler.unlink()  # space again
            assert wait_for(lambda: answer_for("during") in tg.bot_texts(CHAT), timeout=60), tg.bot_texts(
                CHAT
            )  # type: ignore[attr-defined]
            assert wait_for(lambda: ready(service.port).status_code == 200, timeout=10)
            assert disk_up(service.port).endswith(" 1.0")
        finally:
            service.terminate()
        messages = tg.bot_messages(CHAT)  # type: ignore[attr-defined]
        assert [m.text for m in messages] == [answer_for("before"), answer_for("during")], "edited in place"
        during = messages[1]
        assert all(version.count("I'll retry") <= 1 for version in during.history), during.history
        assert not any("went wrong" in version for m in messages for version in m.history)
        assert len(llm.completions) > asked, "the turn ran again once space returned"  # type: ignore[attr-defined]


async def test_the_disk_check_names_the_directory_and_the_reason_and_leaves_nothing_behind(tmp_path: Path):
    good = tmp_path / "data"
    good.mkdir()
    assert await disk_check(good, good / "sb.db").problem() is None
    assert list(good.iterdir()) == [], "the probe file is removed again"
    missing = tmp_path / "elsewhere"
    answer = await disk_check(good, missing / "sb.db").problem()
    assert answer == "not writable: No such file or directory [ENOENT] (database)"
