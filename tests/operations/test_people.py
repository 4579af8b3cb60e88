"""``switchboard users export|delete``: one person's data out as JSON, then gone from every table,
the agent's history and the disk — and nobody else's touched.

Two people (unconnected Telegram accounts, so their owners are ``telegram:-:ID``) talk to the bot in
their direct messages and in a shared group; each leaves a marker in what they say, in a file the agent
writes for them, in a memory fact and in a schedule. After ``users delete`` the first person's marker,
owner id and thread ids are found in no table of the database or the checkpoint file, and their folder
is gone; the second person's are all still there.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import yaml

from agent.memory import EXTRACTION_MARKER
from bot.cli import main as cli_main
from bot.people import IMPERSONAL, PERSONAL_TABLES
from bot.reference import table_names
from channels.memory import MemoryChannel
from tests.agent.helpers import agent_settings, system_text
from tests.fakes.openai_server import Reply, ToolCall, last_user_text
from tests.harness import Harness

PEOPLE = {"4242": "ALICEMARK", "5151": "BOBMARK"}


def model(body: dict[str, Any]) -> Reply:
    """Saves a note in the workspace when asked, learns a fact naming the marker, echoes the rest."""
    messages = body.get("messages", [])
    text = last_user_text(body)
    if EXTRACTION_MARKER in system_text(body):
        marker = next(m for m in PEOPLE.values() if m in text)
        fact = {"content": f"Likes {marker} tea", "category": "preference", "confidence": 0.9}
        return Reply(
            text="```json\n" + json.dumps({"facts": [fact], "summary": f"{marker} person"}) + "\n```"
        )
    if messages and messages[-1].get("role") == "tool":
        return Reply(text="saved")
    if text.startswith("save "):
        marker = text.split()[1]
        return Reply(tool_calls=[ToolCall("bash", {"command": f"echo {marker} > notes-{marker}.txt"})])
    return Reply(text=f"echo: {text}")


def scan(path: Path) -> str:
    """Every value of every table of an SQLite file, as text (blobs decoded loosely)."""
    out: list[str] = []
    with sqlite3.connect(path) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    out.append(value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))
    return "\n".join(out)


async def run_cli(*argv: str) -> int:
    return await asyncio.to_thread(cli_main, list(argv))


def test_every_table_is_either_searched_for_a_persons_data_or_says_why_it_holds_none():
    tables = set(table_names())
    assert tables - PERSONAL_TABLES - set(IMPERSONAL) == set(), (
        "decide in bot/people.py how to find a person here"
    )
    assert set(IMPERSONAL) <= tables and tables >= PERSONAL_TABLES, "bot/people.py names a table that is gone"


async def test_export_then_delete_leaves_nothing_of_the_person_and_everything_of_the_others(
    tmp_path, llm, capsys
):
    llm.default_reply = model
    settings = agent_settings(tmp_path, llm, remember=True, sandbox={"mode": "host"})
    telegram = MemoryChannel("telegram")
    async with Harness.running(settings, channels={"telegram": telegram}) as h:
        for sender, marker in PEOPLE.items():
            dm = {"channel": telegram, "chat": f"dm-{sender}", "sender": sender, "private": True}
            await h.ask(f"hello I am {marker}", **dm)
            assert await h.ask(f"save {marker}", **dm) == "saved"
            await h.ask(f"/schedule every day 09:00 water the {marker} plants", **dm)
            # A background task the agent reported in their chat: its card is theirs (task_cards).
            origin = telegram.make_message("", chat=f"dm-{sender}", sender=sender, private=True)
            conversation = await h.service.threads.get(origin.conversation_key)
            assert conversation is not None
            tasks = h.manager.tasks.reporter(
                origin, owner=conversation.owner, thread_id=conversation.thread_id
            )
            await tasks.started(task_id=f"task-{sender}", title=f"research {marker} prices", kind="subagent")
            await tasks.finished(task_id=f"task-{sender}", status="done", result="done")
            await h.ask(f"in the group {marker} says hi", channel=telegram, chat="team", sender=sender,
                        private=False, mentioned=True)  # fmt: skip
        await h.idle()

    data_dir = Path(settings.data_dir)
    config = tmp_path / "cli.yaml"
    config.write_text(yaml.safe_dump({"database": {"url": settings.database.url}, "data_dir": str(data_dir)}))
    alice, bob = "telegram:-:4242", "telegram:-:5151"
    database = data_dir / "switchboard.db"
    checkpoints = data_dir / "switchboard-checkpoints.db"
    before = scan(database) + scan(checkpoints)
    assert "ALICEMARK" in before and "BOBMARK" in before

    capsys.readouterr()
    assert await run_cli("users", "export", alice, "--config", str(config)) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["owner"] == alice
    dumped = json.dumps(exported)
    assert "BOBMARK" not in dumped, "the export holds nobody else's data"
    assert "Likes ALICEMARK tea" in dumped  # memory
    assert "water the ALICEMARK plants" in dumped  # schedule
    assert "research ALICEMARK prices" in dumped  # task card
    assert "in the group ALICEMARK says hi" in dumped  # what she said in the group
    assert any(f["path"].endswith("notes-ALICEMARK.txt") for f in exported["files"])
    spending = exported["tables"]["spend_daily"]  # what her turns cost, in her DM and in the group
    assert {r["owner"] for r in spending} == {alice} and sum(r["turns"] for r in spending) >= 2
    thread_ids = exported["threads"]
    assert thread_ids

    assert await run_cli("users", "delete", alice, "--config", str(config)) == 1  # no --yes: nothing goes
    assert "run again with --yes" in capsys.readouterr().out
    assert "ALICEMARK" in scan(database), "without --yes nothing was deleted"
    assert await run_cli("users", "delete", alice, "--yes", "--config", str(config)) == 0
    assert f"deleted {alice}" in capsys.readouterr().out

    after = scan(database) + scan(checkpoints)
    for trace in ("ALICEMARK", alice, "4242", *thread_ids):
        assert trace not in after, f"{trace!r} is still stored"
    assert not (data_dir / "users" / "telegram_-_4242").exists() and not any(
        "ALICEMARK" in p.name for p in data_dir.rglob("*")
    )
    for trace in (
        "BOBMARK",
        bob,
        "Likes BOBMARK tea",
        "water the BOBMARK plants",
        "research BOBMARK prices",
        "in the group BOBMARK says hi",
    ):
        assert trace in after, f"{trace!r} of the other person was deleted"
    assert any("BOBMARK" in p.name for p in data_dir.rglob("notes-*.txt"))

    assert await run_cli("users", "export", alice, "--config", str(config)) == 1
    assert "nothing is stored" in capsys.readouterr().err
