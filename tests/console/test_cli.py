"""``switchboard admin``: every console action from a shell, against the real app served by uvicorn."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import yaml

from bot.app import create_app
from bot.cli import main as switchboard
from bot.inbox import DEAD
from bot.manager import STOPPED_NOTE
from channels.memory import MemoryChannel
from tests.conftest import make_settings
from tests.connections.conftest import JWT_SECRET, auth, jwt_overrides, token_for
from tests.console.test_api import RISKY_TURN
from tests.fakes.openai_server import Reply
from tests.serving import serving

pytestmark = pytest.mark.slow  # a real uvicorn server


async def admin(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> tuple[int, str, str]:
    """Run ``switchboard admin ARGV --config CONFIG`` (in a thread: the server runs in this loop)."""
    code = await asyncio.to_thread(switchboard, ["admin", *argv, "--config", str(config)])
    out, err = capsys.readouterr()
    return code, out, err


def cli_config(tmp_path: Path) -> Path:
    """What the operator's shell has: the config with the JWT secret (no model, no channels needed)."""
    path = tmp_path / "cli.yaml"
    path.write_text(yaml.safe_dump({"auth": {"mode": "jwt", "jwt_secret": JWT_SECRET}}))
    return path


async def test_an_operator_runs_every_console_action_from_the_shell(tmp_path, llm, capsys, caplog):
    caplog.set_level(logging.INFO, logger="switchboard.audit")
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(600)), chunk_size=4, delay=0.05), *RISKY_TURN)
    settings = make_settings(
        tmp_path, llm, sandbox={"mode": "host"}, bus={"max_attempts": 1}, **jwt_overrides()
    )
    telegram = MemoryChannel("telegram")
    app = create_app(settings, channels={"telegram": telegram})
    config = cli_config(tmp_path)

    async with serving(app) as url:
        import httpx

        async with httpx.AsyncClient(base_url=url) as http:
            code = await http.post("/api/channels/telegram/connect", headers=auth(token_for("alice")))
        await telegram.say(f"/start {code.json()['code']}", sender="tg-alice")
        await telegram.say("/schedule every day 09:00 water the plants", chat="chat-3")
        await telegram.wait_for_text("Scheduled", chat="chat-3")
        inbox = app.state.service.inbox
        dead = await inbox.accept(telegram.make_message("are you there?", chat="chat-2", message_id="d1"))
        assert await inbox.mark_failed(dead.id, "the model was down") == DEAD

        # A running turn: listed, then stopped; the chat says so.
        await telegram.say("write me a long story", sender_name="Ada", chat="chat-4")
        async with asyncio.timeout(10):
            while "running" not in (out := (await admin(capsys, config, "turns", "--url", url))[1]):
                await asyncio.sleep(0.1)
        entry_id = out.split()[0]
        assert "Ada" in out and "write me a long story" in out
        assert await admin(capsys, config, "stop", entry_id, "--url", url) == (
            0,
            f"{entry_id}: stopping\n",
            "",
        )
        await telegram.wait_for_text(STOPPED_NOTE, chat="chat-4")

        # A waiting command: approved from the shell, it runs.
        await app.state.service.manager.wait_idle()
        await telegram.say("clean up the build", sender_name="Ada", chat="chat-5")
        await telegram.wait_for_text("Approval needed", chat="chat-5", timeout=30)
        status, out, _ = await admin(capsys, config, "approvals", "--url", url)
        approval_id = out.split()[0]
        assert status == 0 and "rm -rf" in out
        status, out, _ = await admin(capsys, config, "approve", approval_id, "--url", url)
        assert status == 0 and out.startswith(f"{approval_id}: ")
        await telegram.wait_for_text("Approved by cli (console)", chat="chat-5")
        await telegram.wait_for_text("done with the build directory", chat="chat-5", timeout=30)

        # A dead letter retried: it is answered.
        assert (await admin(capsys, config, "retry", dead.id, "--url", url))[0] == 0
        await telegram.wait_for_text("echo: are you there?", chat="chat-2")

        # A schedule cancelled, a connection unlinked: both gone from the lists.
        schedule_id = (await admin(capsys, config, "schedules", "--url", url))[1].split()[0]
        assert await admin(capsys, config, "cancel-schedule", schedule_id, "--url", url) == (
            0,
            f"{schedule_id}: cancelled\n",
            "",
        )
        assert (await admin(capsys, config, "schedules", "--url", url))[1] == "no schedules\n"
        people = (await admin(capsys, config, "people", "--json", "--url", url))[1]
        [alice] = [p for p in yaml.safe_load(people) if p["id"] == "alice"]
        connection_id = alice["connections"][0]["id"]
        status, out, _ = await admin(capsys, config, "unlink", "alice", connection_id, "--url", url)
        assert status == 0 and "unlinked alice's telegram account" in out
        status, _, err = await admin(capsys, config, "unlink", "alice", connection_id, "--url", url)
        assert status == 1 and "404: alice has no active connection" in err
    audited = [r.getMessage() for r in caplog.records if r.name == "switchboard.audit"]
    assert f"console: stop {entry_id} by cli" in audited
    assert f"console: unlink {connection_id} by cli" in audited


async def test_the_shell_is_told_when_its_token_is_no_operators_or_nothing_answers(tmp_path, llm, capsys):
    app = create_app(
        make_settings(tmp_path, llm, **jwt_overrides()), channels={"telegram": MemoryChannel("telegram")}
    )
    config = cli_config(tmp_path)
    async with serving(app) as url:
        status, out, err = await admin(capsys, config, "turns", "--url", url, "--token", token_for("alice"))
        assert (status, out) == (1, "")
        assert "403: alice is not an operator" in err
        assert (await admin(capsys, config, "channels", "--url", url))[
            1
        ] == "telegram  connected  -  receiving\n"
    status, _, err = await admin(capsys, config, "turns", "--url", url)
    assert status == 1 and f"no service answers at {url}/api/admin/turns" in err
