"""After ``/new`` the old thread's history and files go once idle for ``database.retention_days``.

"Earlier messages are forgotten" used to delete nothing: the old thread's checkpoints (the whole message
list of every turn) and workspace stayed forever. The retention pass now deletes a thread no
conversation points at once nothing in it changed for the retention period — and never the thread a
conversation still uses, however old.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from tests.agent.helpers import agent_settings
from tests.fakes.openai_server import Reply, ToolCall, last_user_text
from tests.harness import Harness

DAY = 86400.0


def model(body: dict[str, Any]) -> Reply:
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return Reply(text="written")
    text = last_user_text(body)
    return Reply(tool_calls=[ToolCall("bash", {"command": f"echo '{text}' > note.txt"})])


def checkpointed_threads(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT DISTINCT thread_id FROM checkpoints")}


def age(folder: Path, days: float) -> None:
    then = time.time() - days * DAY
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (then, then), follow_symlinks=False)


async def test_a_thread_left_by_new_is_deleted_after_retention_and_the_current_one_never(tmp_path, llm):
    llm.default_reply = model
    settings = agent_settings(tmp_path, llm, sandbox={"mode": "host"}, database={
        "url": f"sqlite+aiosqlite:///{tmp_path / 'data' / 'switchboard.db'}", "retention_days": 30})  # fmt: skip
    data = Path(settings.data_dir)
    checkpoints = data / "switchboard-checkpoints.db"
    async with Harness.running(settings) as h:
        assert await h.ask("first thread notes") == "written"
        [old] = list(data.glob("users/*/threads/*"))
        await h.ask("/new")
        assert await h.ask("second thread notes") == "written"
        [current] = [p for p in data.glob("users/*/threads/*") if p != old]
        assert checkpointed_threads(checkpoints) == {old.name, current.name}

        age(old, days=29)  # not yet: idle less than the retention period
        assert (await h.service.retention.run_once()).get("abandoned threads") == 0
        assert old.exists()

        age(old, days=31)
        age(current, days=400)  # in use: never deleted, however old
        deleted = await h.service.retention.run_once()
        assert deleted["abandoned threads"] == 1
        assert not old.exists() and current.exists()
        assert checkpointed_threads(checkpoints) == {current.name}

        assert await h.ask("the current thread still works") == "written"
        await h.idle()


async def test_forget_deletes_this_chats_conversation_now_and_only_its_owner_or_an_admin_may(tmp_path, llm):
    from channels.memory import MemoryChannel

    llm.default_reply = model
    settings = agent_settings(tmp_path, llm, sandbox={"mode": "host"})
    chat = MemoryChannel("memory", admins=["lead"])
    data = Path(settings.data_dir)
    checkpoints = data / "switchboard-checkpoints.db"
    async with Harness.running(settings, channels={"memory": chat}) as h:
        assert await h.ask("secret plans") == "written"
        [old] = list(data.glob("users/*/threads/*"))
        assert await h.ask("/forget") == (
            "This deletes this chat's conversation for good: everything I was told and answered here, and "
            "the files of this conversation. Send /forget yes to do it."
        )
        assert old.exists(), "asking changes nothing"
        assert (await h.ask("/forget yes")).startswith("🧹 Forgotten")
        assert not old.exists()
        assert old.name not in checkpointed_threads(checkpoints)
        assert await h.ask("new start") == "written"
        assert "secret plans" not in str(llm.completions[-1]["messages"]), (
            "the model was told nothing of before"
        )

        group = {"chat": "team", "private": False, "mentioned": True}
        assert await h.ask("group notes", **group) == "written"
        await h.ask("/forget yes", **group)
        refusal = await chat.wait_for_text("Only an admin of this chat", chat="team")
        assert refusal is not None
        await h.ask("/forget yes", sender="lead", sender_name="Lee", **group)
        await chat.wait_for_text("🧹 Forgotten", chat="team")
        await h.idle()
