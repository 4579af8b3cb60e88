"""``kill -HUP`` on a real ``switchboard serve``: the new admin counts at once, the running turn goes on.

The service talks to the fake Telegram Bot API and the fake model over real sockets; the test only
writes the config file and sends the signal, as an operator would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram import FakeTelegram
from tests.foundation.test_cli import cli_env, free_port

pytestmark = pytest.mark.slow

ADMIN, MEMBER = 42, 7
STORY = " ".join(f"word{i}" for i in range(90))  # about 15 s of streaming: still running at the reload


def config(tmp_path: Path, port: int, llm: FakeOpenAI, tg: FakeTelegram, admins: list[Any]) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "data_dir": str(tmp_path / "data"),
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}"},
        "sandbox": {"mode": "host"},
        "memory": {"enabled": False},
        "models": [
            {"name": "default", "model": "m", "api_key": "sk-x", "base_url": llm.base_url, "max_retries": 0}
        ],
        "channels": {
            "telegram": {
                "enabled": True,
                "bot_token": tg.token,
                "bot_username": tg.bot_username,
                "api_base_url": tg.url,
                "edit_interval_seconds": 0.05,
                "poll_timeout_seconds": 1,
                "private_drafts": False,
                "trust": {"members": ["*"]},
                "admins": admins,
            }
        },
    }


async def until(tg: FakeTelegram, predicate: Any, timeout: float = 60) -> Any:
    return await tg.wait_until(predicate, timeout)


async def until_ready(port: int, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """``/ready`` answers 200 (channels started, agent built), or the process ended (the log says why)."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        for _ in range(1800):
            assert proc.poll() is None, log_path.read_text()
            try:
                if (await client.get("/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("serve never became ready")


async def test_sighup_adds_an_admin_without_dropping_a_running_turn(tmp_path):
    port = free_port()
    path = tmp_path / "config.yaml"
    log_path = tmp_path / "serve.log"
    with FakeOpenAI() as llm, FakeTelegram(long_poll_cap=0.5) as tg:
        path.write_text(yaml.safe_dump(config(tmp_path, port, llm, tg, admins=[])))
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bot", "--log-format", "json", "serve", "--config", str(path)],
                cwd=tmp_path,
                env=cli_env(),
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )
        try:
            await until_ready(port, proc, log_path)

            tg.user_message(ADMIN, "/approval always", user_id=ADMIN)
            await tg.wait_for_bot_text(ADMIN, "only an admin of this bot can change approvals", timeout=30)

            # A long answer, streamed slowly, is running when the signal arrives.
            llm.script(Reply(text=STORY, chunk_size=6, delay=0.15))
            tg.user_message(MEMBER, "tell me a story", user_id=MEMBER)
            await until(tg, lambda: llm.completion_times)

            path.write_text(
                yaml.safe_dump(config(tmp_path, port, llm, tg, admins=[ADMIN]))
            )  # a number, as YAML reads it
            os.kill(proc.pid, signal.SIGHUP)
            await until(tg, lambda: "reload: applied channels.telegram.admins" in log_path.read_text())
            assert llm.completion_times[0][1] is None, (
                "the turn had finished before the reload: nothing shown"
            )

            tg.user_message(ADMIN, "/approval always", user_id=ADMIN)
            await tg.wait_for_bot_text(ADMIN, "Approval here is now always", timeout=30)

            story = await tg.wait_for_bot_text(MEMBER, "word89", timeout=90)
            assert story.text.strip() == STORY  # the running turn finished whole
            assert proc.poll() is None
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
    assert code in (0, -signal.SIGTERM), log_path.read_text()  # uvicorn re-raises the signal it drained on
    log = log_path.read_text()
    assert "needs a restart: nothing" in log


async def test_a_reload_swaps_the_model_reports_what_needs_a_restart_and_a_bad_model_changes_nothing(
    tmp_path, llm
):
    from bot.reload import apply
    from tests.conftest import make_settings
    from tests.harness import Harness

    settings = make_settings(tmp_path, llm)
    async with Harness.running(settings) as h:
        assert await h.ask("hi") == "echo: hi"
        models = [m.model_dump() for m in settings.models]

        renamed = make_settings(
            tmp_path,
            llm,
            models=[{**models[0], "model": "fake-renamed"}, models[1]],
            agent={"system_prompt": "You are the reloaded bot."},
        )
        renamed.server.port = 9999
        report = await apply(h.service, renamed)
        assert report.applied == ["agent.system_prompt", "models"]
        assert report.restart == ["server.port"]
        await h.ask("again")
        request = llm.completions[-1]
        assert request["model"] == "fake-renamed"  # the next turn uses the new entry
        assert request["messages"][0]["content"] == "You are the reloaded bot."

        broken = make_settings(tmp_path, llm, models=[{**models[0], "use": "nowhere:Model"}])
        broken.channels.telegram.admins = ["1"]
        report = await apply(h.service, broken)
        assert report.problems and report.problems[0].startswith("models: nowhere:Model:")
        assert report.applied == []
        assert settings.channels.telegram.admins == []  # nothing applied
        assert settings.models[0].model == "fake-renamed"
