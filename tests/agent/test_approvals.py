"""Risky commands wait for approval in chat (``sandbox.approval``, bot/approvals.py).

The model asks to delete a directory in its workspace; the test plays the people in the chat. What they
would notice: the approval request shows the exact command; Approve runs it (the directory is gone),
Deny and silence don't (it is still there); the model is told which; in a group only an admin can say
yes (the requester's own yes is refused) unless the channel sets ``approvers: requester``; "allow until
/new" lets the same command pattern run unasked; a blocklisted command never runs, not even under
``approval: never``; a decision sent twice acts once; a restart never runs a command approved before it.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from bot.approvals import ApprovalDesk, ChatApproval
from bot.approvals import metadata as approvals_metadata
from bot.db import Database
from channels.memory import MemoryChannel
from tests.agent.helpers import agent_settings, all_tool_results, tool_results, wait_until
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.harness import Harness

RISKY = "rm -rf /mnt/user-data/workspace/build"
ASKED = re.compile(r"/approve ([A-Z2-9]{6})")


def settings_for(tmp_path: Path, llm: FakeOpenAI, **sandbox: object):  # type: ignore[no-untyped-def]
    return agent_settings(tmp_path, llm, sandbox={"mode": "host", **sandbox})


async def start_risky_turn(
    h: Harness, llm: FakeOpenAI, *, finish: bool = True, **say: object
) -> tuple[str, Path]:
    """The model wants to run RISKY in a workspace that has a build/ directory; returns (id, workspace).

    ``finish``: the model's answer after the command is scripted too (not when the turn is cut off).
    """
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
        *([Reply(text="done with the build directory")] if finish else []),
    )
    await h.chat.say("clean up the build", **say)  # type: ignore[arg-type]
    chat = str(say.get("chat", "chat-1"))
    request = await h.chat.wait_for_text("🔐 Approval needed", chat=chat, timeout=30)
    assert RISKY in request.text and "deletes files" in request.text
    match = ASKED.search(request.text)
    assert match is not None, request.text
    [workspace] = Path(h.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")
    return match.group(1), workspace


async def test_approve_runs_the_command_and_the_model_goes_on(tmp_path, llm):
    async with Harness.running(settings_for(tmp_path, llm)) as h:
        approval_id, workspace = await start_risky_turn(h, llm)
        assert (workspace / "build" / "out").exists()  # waiting: nothing ran yet
        await h.chat.say(f"/approve {approval_id}")
        await h.chat.wait_for_text("done with the build directory", timeout=30)
        await h.idle()
        assert not (workspace / "build").exists()
        assert any(m.text.startswith(f"✅ Approved {approval_id}") for m in h.chat.in_chat())
        # The model was told the command ran (the last tool result it saw, not a "[not run]").
        assert tool_results(llm.completions[-1])[-1].startswith("[exit code 0]")


async def test_deny_keeps_the_files_and_the_model_is_told(tmp_path, llm):
    async with Harness.running(settings_for(tmp_path, llm)) as h:
        approval_id, workspace = await start_risky_turn(h, llm)
        await h.chat.say(f"/deny {approval_id}")
        await h.chat.wait_for_text("done with the build directory", timeout=30)
        await h.idle()
        assert (workspace / "build" / "out").exists()
        assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))
        # Sent again (a redelivery, a second click): nothing changes, and the person is told so.
        await h.chat.say(f"/deny {approval_id}")
        await h.idle()
        assert h.chat.in_chat()[-1].text == f"Approval {approval_id} is denied; nothing changed."


async def test_no_answer_within_the_timeout_means_not_run(tmp_path, llm):
    async with Harness.running(settings_for(tmp_path, llm, approval_timeout_seconds=1)) as h:
        approval_id, workspace = await start_risky_turn(h, llm)
        await h.chat.wait_for_text(f"⌛ Approval {approval_id} expired", timeout=30)
        await h.chat.wait_for_text("done with the build directory", timeout=30)
        await h.idle()
        assert (workspace / "build" / "out").exists()
        assert any("[not run] Nobody approved the command within 1 s" in r for r in all_tool_results(llm))
        await h.chat.say(f"/approve {approval_id}")  # too late: nothing runs
        await h.idle()
        assert h.chat.in_chat()[-1].text == f"Approval {approval_id} is expired; nothing changed."
        assert (workspace / "build" / "out").exists()


GROUP = {"chat": "team", "private": False, "mentioned": True}


async def test_in_a_group_the_requester_cannot_approve_his_own_command_but_an_admin_can(tmp_path, llm):
    chat = MemoryChannel("memory", admins=["lead"])
    async with Harness.running(settings_for(tmp_path, llm), channels={"memory": chat}) as h:
        approval_id, workspace = await start_risky_turn(h, llm, **GROUP)
        request = request_message(h, approval_id, "team")
        assert "only an admin of this chat can approve" in request.text
        await h.chat.say(f"/approve {approval_id}", **GROUP)  # the requester himself
        refusal = await h.chat.wait_for_text(
            "Sorry, only an admin of this chat can approve this", chat="team"
        )
        assert approval_id in refusal.text and "/deny" in refusal.text
        await h.chat.say(f"/approve {approval_id}", sender="user-2", sender_name="mallory", **GROUP)
        await h.chat.wait_for(
            lambda ch: (
                sum("only an admin of this chat can approve this" in m.text for m in ch.in_chat("team")) == 2
            )
        )
        assert (workspace / "build" / "out").exists(), "a non-admin's yes ran the command"
        await h.chat.say(f"/approve {approval_id}", sender="lead", sender_name="Lee", **GROUP)
        await h.chat.wait_for_text("done with the build directory", chat="team", timeout=30)
        await h.idle()
        assert not (workspace / "build").exists()
        assert request.text.endswith("✅ Approved by Lee — running it."), request.text


async def test_approvers_requester_lets_the_person_who_asked_approve_in_a_group(tmp_path, llm):
    chat = MemoryChannel("memory", approvers="requester")
    async with Harness.running(settings_for(tmp_path, llm), channels={"memory": chat}) as h:
        approval_id, workspace = await start_risky_turn(h, llm, **GROUP)
        await h.chat.say(f"/approve {approval_id}", sender="user-2", sender_name="mallory", **GROUP)
        refusal = await h.chat.wait_for_text("Sorry, only user-1 can decide", chat="team")
        assert approval_id in refusal.text
        assert (workspace / "build" / "out").exists()
        await h.chat.say(f"/approve {approval_id}", **GROUP)
        await h.chat.wait_for_text("done with the build directory", chat="team", timeout=30)
        await h.idle()
        assert not (workspace / "build").exists()


async def test_a_group_without_admins_is_told_nobody_can_approve_and_the_requester_may_still_deny(
    tmp_path, llm
):
    async with Harness.running(settings_for(tmp_path, llm)) as h:
        approval_id, workspace = await start_risky_turn(h, llm, **GROUP)
        assert "none is set (channels.memory.admins)" in request_message(h, approval_id, "team").text
        await h.chat.say(f"/deny {approval_id}", **GROUP)
        await h.chat.wait_for_text("done with the build directory", chat="team", timeout=30)
        await h.idle()
        assert (workspace / "build" / "out").exists()
        assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))


async def test_allow_until_new_runs_the_same_pattern_unasked_and_new_asks_again(tmp_path, llm):
    async with Harness.running(settings_for(tmp_path, llm)) as h:
        approval_id, workspace = await start_risky_turn(h, llm)
        request = request_message(h, approval_id)
        assert f"/approve {approval_id} session" in request.text and "`rm`" in request.text
        await h.chat.press(request.ref, "Allow until /new")
        await h.chat.wait_for_text("done with the build directory", timeout=30)
        await h.idle()
        assert not (workspace / "build").exists()
        assert "`rm` now runs without asking in this conversation until /new" in request.text
        # Another rm in the same conversation runs at once; a different risky program still asks.
        llm.script(
            Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p b2 && rm -rf b2 && echo gone"})]),
            Reply(text="second clean-up done"),
        )
        assert "second clean-up done" in await h.ask("clean up again")
        assert "gone" in all_tool_results(llm)[-1]
        assert sum(m.text.startswith("🔐") for m in h.chat.in_chat()) == 1
        llm.script(
            Reply(tool_calls=[ToolCall("bash", {"command": "git push origin main"})]),
            Reply(text="push handled"),
        )
        await h.chat.say("push it")
        pushed = await h.chat.wait_for_text("`git push`", timeout=30)
        await h.chat.press(pushed.ref, "Deny")
        await h.chat.wait_for_text("push handled", timeout=30)
        await h.idle()
        # /new starts another conversation: the allowance stays behind.
        assert "Started a new conversation" in await h.ask("/new")
        llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf b3"})]), Reply(text="third"))
        await h.chat.say("and clean once more")
        await h.chat.wait_for(lambda ch: sum(m.text.startswith("🔐") for m in ch.in_chat()) == 3, timeout=30)
        last = [m for m in h.chat.in_chat() if m.text.startswith("🔐")][-1]
        assert "rm -rf b3" in last.text
        await h.chat.press(last.ref, "Deny")
        await h.idle(timeout=30)


async def test_a_blocklisted_command_is_refused_even_under_never(tmp_path, llm):
    async with Harness.running(settings_for(tmp_path, llm, approval="never")) as h:
        llm.script(
            Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p keep && rm -rf / --no-preserve-root"})]),
            Reply(text="could not"),
        )
        assert "could not" in await h.ask("wipe the machine")
        [result] = all_tool_results(llm)
        assert result.startswith("[refused] This command deletes the whole system"), result
        assert "whatever its approval settings" in result
        [workspace] = Path(h.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")
        assert not (workspace / "keep").exists(), "part of a blocklisted command line ran"
        assert not any("Approval" in m.text for m in h.chat.in_chat())


def request_message(h: Harness, approval_id: str, chat: str = "chat-1"):  # type: ignore[no-untyped-def]
    return next(m for m in h.chat.in_chat(chat) if approval_id in m.text and m.text.startswith("🔐"))


async def test_the_approve_button_runs_it_once_and_the_request_says_who_approved(tmp_path, llm):
    async with Harness.running(settings_for(tmp_path, llm)) as h:
        approval_id, workspace = await start_risky_turn(h, llm)
        request = request_message(h, approval_id)
        assert [(a.label, a.command) for a in request.actions] == [
            ("Approve", f"/approve {approval_id}"),
            ("Allow until /new", f"/approve {approval_id} session"),
            ("Deny", f"/deny {approval_id}"),
        ]
        press = h.chat.press_message(request.ref, "Approve")
        await h.chat.deliver(press)
        await h.chat.deliver(h.chat.press_message(request.ref, "Approve"))  # a second click, at once
        await h.chat.wait_for_text("done with the build directory", timeout=30)
        await h.idle()
        assert not (workspace / "build").exists()
        assert request.text.endswith("✅ Approved by user-1 — running it."), request.text
        assert RISKY in request.text and request.actions == (), "the buttons outlived the decision"
        # The press needed no second message; the second click was told nothing changed.
        texts = [m.text for m in h.chat.in_chat()]
        assert not any(t.startswith(f"✅ Approved {approval_id}") for t in texts)
        assert (
            texts.count(f"Approval {approval_id} was already decided; nothing changed.")
            + texts.count(f"Approval {approval_id} is approved; nothing changed.")
            == 1
        )
        assert tool_results(llm.completions[-1])[-1].startswith("[exit code 0]")


async def test_deny_by_button_in_a_group_only_from_the_asker_or_an_admin(tmp_path, llm):
    chat = MemoryChannel("memory", admins=["lead"])
    async with Harness.running(settings_for(tmp_path, llm), channels={"memory": chat}) as h:
        group = {"chat": "team", "private": False, "mentioned": True}
        approval_id, workspace = await start_risky_turn(h, llm, **group)
        request = request_message(h, approval_id, "team")
        await h.chat.press(request.ref, "Deny", sender="user-2", sender_name="mallory")
        await h.chat.wait_for_text("Sorry, only user-1 can decide", chat="team")
        assert (workspace / "build" / "out").exists() and request.actions, "a stranger's press decided"
        await h.chat.press(request.ref, "Deny", sender="lead", sender_name="Lee")
        await h.chat.wait_for_text("done with the build directory", chat="team", timeout=30)
        await h.idle()
        assert (workspace / "build" / "out").exists()
        assert request.text.endswith("🚫 Denied by Lee; it did not run.") and request.actions == ()
        assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))


async def test_an_admin_sets_a_chats_own_approval_mode_and_nobody_else_can(tmp_path, llm):
    chat = MemoryChannel("memory", admins=["lead"])
    async with Harness.running(settings_for(tmp_path, llm), channels={"memory": chat}) as h:
        group = {"chat": "team", "private": False, "mentioned": True}
        assert "risky (the bot's default)" in await h.ask("/approval", **group)
        refused = await h.ask("/approval never", sender="user-2", **group)
        assert refused == "Sorry, only an admin of this bot can change approvals for a chat."
        assert "now never" in await h.ask("/approval never", sender="lead", **group)
        llm.script(
            Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && " + RISKY + " && echo gone"})]),
            Reply(text="cleaned"),
        )
        assert "cleaned" in await h.ask("clean up", **group)
        assert not any("Approval needed" in m.text for m in h.chat.in_chat("team"))
        assert "gone" in all_tool_results(llm)[-1]
        # Another chat keeps the service's mode; "default" brings this one back to it.
        llm.script(Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]), Reply(text="asked first"))
        elsewhere = {"chat": "elsewhere", "private": False, "mentioned": True}
        await h.chat.say("clean up here too", **elsewhere)
        request = await h.chat.wait_for_text("🔐 Approval needed", chat="elsewhere", timeout=30)
        await h.chat.press(request.ref, "Deny")
        await h.idle(timeout=30)
        assert "now risky" in await h.ask("/approval default", sender="lead", **group)
        assert "risky (the bot's default)" in await h.ask("/approval", **group)


async def test_ordinary_commands_run_without_asking_and_never_means_never(tmp_path, llm):
    async with Harness.running(settings_for(tmp_path, llm, approval="never")) as h:
        llm.script(
            Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && rm -rf build && echo gone"})]),
            Reply(text="cleaned"),
        )
        assert "cleaned" in await h.ask("clean up")
        assert not any("Approval" in m.text for m in h.chat.in_chat())
        assert "gone" in all_tool_results(llm)[0]


@pytest.mark.slow
async def test_a_restart_with_an_approval_pending_runs_nothing_without_a_fresh_approval(tmp_path, llm):
    settings = settings_for(tmp_path, llm)
    chat = MemoryChannel("memory")  # the same platform across the restart
    first = Harness(settings, channels={"memory": chat})
    await first.start()
    old_id, workspace = await start_risky_turn(first, llm, finish=False)
    await first.stop(grace=0.5)  # the turn is cut off while it waits; its message stays unfinished
    await chat.wait_for_text(f"⌛ Approval {old_id} withdrawn")

    # After the restart the interrupted turn runs again: the model asks for the same command anew.
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]), Reply(text="second try done"))
    async with Harness.running(settings, channels={"memory": chat}) as second:
        await second.chat.say(f"/approve {old_id}")  # the old request is dead
        await second.chat.wait_for_text(f"Approval {old_id} is cancelled; nothing changed.")
        assert (workspace / "build" / "out").exists()
        await second.chat.wait_for(
            lambda ch: any("🔐 Approval needed" in m.text and old_id not in m.text for m in ch.in_chat()),
            timeout=30,
        )
        [request] = [
            m for m in second.chat.in_chat() if "🔐 Approval needed" in m.text and old_id not in m.text
        ]
        new_match = ASKED.search(request.text)
        assert new_match is not None
        await second.chat.say(f"/approve {new_match.group(1)}")
        await second.chat.wait_for_text("second try done", timeout=30)
        assert not (workspace / "build").exists()


async def desk_database(tmp_path: Path) -> tuple[Database, list[str], Any]:
    """An approvals table in a file of its own, and a ``notify`` that keeps what the chat would show."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'approvals.db'}")
    await db.create_schema([approvals_metadata])
    posted: list[str] = []

    async def notify(message, text, *, actions=(), resume_ref=None):  # type: ignore[no-untyped-def]
        posted.append(text)  # the platform edge: what the chat would show
        return None

    return db, posted, notify


async def test_a_guests_command_needs_an_admin_even_in_his_own_direct_messages(tmp_path):
    """The trust level the bot decides at the edge reaches the approval: a guest never approves himself."""
    db, posted, notify = await desk_database(tmp_path)
    chat = MemoryChannel("memory", admins=["lead"])
    desk = ApprovalDesk(db, notify, timeout=60, channels={"memory": chat})
    asking = ChatApproval(desk, chat.make_message("clean up", sender="guest-1"), "thread-1")
    try:
        waiting = asyncio.create_task(
            asking.approve(
                "rm -rf build", "deletes files recursively or by force", patterns=("rm",), trust="guest"
            )
        )
        await wait_until(lambda: bool(posted))
        assert "only an admin of this chat can approve" in posted[0], posted[0]
        match = ASKED.search(posted[0])
        assert match is not None
        approval_id = match.group(1)
        own = await desk.decide(approval_id, chat.make_message("/approve", sender="guest-1"), approve=True)
        assert not own.ok and own.text.startswith("Sorry, only an admin of this chat can approve this")
        assert not waiting.done()
        lead = await desk.decide(
            approval_id, chat.make_message("/approve", sender="lead"), approve=True, admin=True
        )
        assert lead.ok
        assert (await waiting).approved
    finally:
        await db.close()


async def test_the_requesters_yes_from_another_conversation_is_refused_an_admins_is_not(tmp_path, llm):
    """An approval is decided where it was asked: a person who may approve in the group (``approvers:
    requester``) cannot approve it from a direct message — whoever reads that DM (a shared phone, a
    forwarded chat) never saw the request in the group. An admin may decide for any conversation."""
    chat = MemoryChannel("memory", approvers="requester", admins=["lead"])
    async with Harness.running(settings_for(tmp_path, llm), channels={"memory": chat}) as h:
        approval_id, workspace = await start_risky_turn(h, llm, **GROUP)
        await h.chat.say(f"/approve {approval_id}", chat="dm-user-1", private=True)
        refusal = await h.chat.wait_for_text("belongs to another conversation", chat="dm-user-1")
        assert approval_id in refusal.text
        assert (workspace / "build" / "out").exists(), "a yes from another conversation ran the command"

        await h.chat.say(
            f"/approve {approval_id}", sender="lead", sender_name="Lee", chat="dm-lead", private=True
        )
        await h.chat.wait_for_text("done with the build directory", chat="team", timeout=30)
        await h.idle()
        assert not (workspace / "build").exists()


async def test_a_request_closed_by_another_process_ends_the_wait_at_its_timeout(tmp_path):
    """Two processes share one database (a cluster; here a second desk on the same file) and the other
    one's start-up closes this process's request as a leftover: the turn is not left waiting forever for
    a decision nobody can give any more; at its timeout it goes on, told the command did not run."""
    db, posted, notify = await desk_database(tmp_path)
    chat = MemoryChannel("memory", admins=["lead"])
    here = ApprovalDesk(db, notify, timeout=1, channels={"memory": chat})
    other = ApprovalDesk(db, notify, timeout=60, channels={"memory": chat})
    asking = ChatApproval(here, chat.make_message("clean up", sender="user-1"), "thread-1")
    try:
        waiting = asyncio.create_task(asking.approve("rm -rf build", "deletes files recursively or by force"))
        await wait_until(lambda: bool(posted))
        assert await other.expire_leftovers() == 1  # it cannot tell this request from a dead process's
        decision = await asyncio.wait_for(waiting, 10)
        assert not decision.approved
        assert "did not run" in decision.note
    finally:
        await db.close()
