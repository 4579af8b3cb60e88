"""Buttons on Discord: the Stop button and Approve/Deny as message components, presses as interactions.

What a person in Discord notices: a streaming answer carries a red "⏹ Stop" button; pressing it stops
the answer and the button is gone from the final message; somebody else's press is answered with a
note only they see, and the answer goes on; Approve runs the risky command, Deny doesn't, and the model
is told; a press Discord delivers twice acts once. Every press goes through the fake's interaction
callback, which accepts one callback per interaction within 3 s (40060 / 10062 otherwise), and every
message's components are validated as Discord documents them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from channels.discord.channel import DiscordChannel
from tests.agent.helpers import agent_settings, all_tool_results, tool_results
from tests.channels.discord.conftest import USER_ID, discord_config, eventually, final_reply
from tests.conftest import make_settings
from tests.fakes.discord import FakeDiscord, FakeInteraction, FakeMessage
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.harness import Harness

STOP = "⏹ Stop"
OTHER_ID = "5151"  # somebody else in the server
STOP_ID = re.compile(r"/stop [0-9a-f]{1,32}")
RISKY = "rm -rf /mnt/user-data/workspace/build"
ASKED = re.compile(r"/approve ([A-Z2-9]{6})")
DEFERRED_UPDATE = 6


def slow_answer(llm: FakeOpenAI, words: int = 200) -> None:
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(words)), chunk_size=8, delay=0.05))


async def live_reply(fake: FakeDiscord, channel_id: str) -> FakeMessage:
    """The streaming answer in ``channel_id`` once it shows text and a button."""

    def probe() -> FakeMessage | None:
        return next((m for m in fake.in_channel(channel_id) if "word3" in m.text and m.buttons), None)

    return await eventually(probe, what=f"a streaming answer with its button in {channel_id}")


def public_texts(fake: FakeDiscord, channel_id: str) -> list[str]:
    return [m.text for m in fake.in_channel(channel_id) if not m.ephemeral]


def acknowledged_once(press: FakeInteraction) -> bool:
    return press.callback_attempts == 1 and press.callback_after is not None and press.callback_after < 3


async def test_pressing_stop_stops_the_answer_and_the_button_is_gone_from_the_final_message(
    discord_harness, discord_fake, llm
):
    slow_answer(llm)
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "tell me a long story")
    reply = await live_reply(discord_fake, dm)
    [button] = reply.buttons
    assert (button["label"], button["style"]) == (STOP, 4)  # red: danger
    assert STOP_ID.fullmatch(button["custom_id"]), button
    press = discord_fake.press(reply.id, STOP, USER_ID)
    await eventually(lambda: reply.text.endswith("⏹ Stopped."), what="the answer to stop")
    await discord_harness.idle(timeout=20)
    assert "word199" not in reply.text
    assert reply.components == [] and reply.components_history[-1] == [], (
        "the Stop button outlived its answer"
    )
    assert "Stopping the current reply." not in public_texts(discord_fake, dm), "a press needs no notice"
    # Stored, then acknowledged without a visible change (type 6) inside Discord's window, once.
    assert press.callback_type == DEFERRED_UPDATE and acknowledged_once(press)


async def test_somebody_elses_press_is_refused_only_to_them_and_the_answer_goes_on(
    discord_harness, discord_fake, llm
):
    slow_answer(llm, words=60)
    asked = discord_fake.message_create(
        discord_fake.channel_id,
        USER_ID,
        f"<@{discord_fake.bot_id}> a long story please",
        mentions=[discord_fake.bot_id],
    )
    thread = asked["id"]  # the mention opened a thread, which holds the conversation
    reply = await live_reply(discord_fake, thread)
    press = discord_fake.press(reply.id, STOP, OTHER_ID)

    def refusal() -> FakeMessage | None:
        messages = discord_fake.interaction_messages(press.id)
        return next((m for m in messages if "only the person who asked" in m.text), None)

    note = await eventually(refusal, what="the refusal to the presser")
    assert note.ephemeral, "the refusal was shown to the whole thread"
    await discord_harness.idle(timeout=30)
    assert "word59" in reply.text and "Stopped" not in reply.text
    assert reply.components == []
    assert not any("only the person who asked" in t for t in public_texts(discord_fake, thread))
    assert press.callback_attempts == 1


async def test_a_press_delivered_twice_acts_once(discord_harness, discord_fake, llm):
    slow_answer(llm)
    dm = discord_fake.new_id()
    discord_fake.message_create(dm, USER_ID, "tell me a long story")
    reply = await live_reply(discord_fake, dm)
    press = discord_fake.press(reply.id, STOP, USER_ID)
    discord_fake.redeliver(press)  # the same INTERACTION_CREATE again, as a gateway replay would
    await eventually(lambda: reply.text.endswith("⏹ Stopped."), what="the answer to stop")
    await discord_harness.idle(timeout=20)
    notices = [
        t for t in public_texts(discord_fake, dm) if t.startswith(("Stopping", "That reply", "Nothing"))
    ]
    assert notices == [], "the replayed press was run again (it would say the reply had finished)"
    assert acknowledged_once(press), "the redelivered press was acknowledged again"
    assert discord_harness.channels["discord"].interactions.received == 2, "the replay never arrived"
    entries = await discord_harness.service.inbox.entries()
    assert len(entries) == 2 and {e.status for e in entries} == {"done"}  # the message and one press
    stored = {e.message.pressed is not None: e.message for e in entries}
    asked, pressed = stored[False], stored[True]
    assert pressed.conversation_key == asked.conversation_key and pressed.is_private
    assert (pressed.pressed, pressed.platform_message_id, pressed.sender.id) == (reply.id, press.id, USER_ID)


async def test_the_stop_button_on_a_turn_a_slash_command_started_stops_it(discord_harness, discord_fake, llm):
    # The turn streams into a followup of the command's interaction; the button rides on its webhook.
    await eventually(lambda: discord_fake.app_commands, what="the slash commands to be registered")
    slow_answer(llm)
    dm = discord_fake.new_id()
    command = discord_fake.interaction_create(dm, USER_ID, "goal", "tell a long story")
    reply = await live_reply(discord_fake, dm)
    assert reply.id in command.followups
    press = discord_fake.press(reply.id, STOP, USER_ID)
    await eventually(lambda: reply.text.endswith("⏹ Stopped."), what="the answer to stop")
    await discord_harness.idle(timeout=20)
    assert "word199" not in reply.text and reply.components == []
    assert press.callback_type == DEFERRED_UPDATE and acknowledged_once(press)


async def test_a_press_the_inbox_cannot_take_is_answered_busy_to_the_presser_only(
    tmp_path, llm, discord_fake
):
    settings = make_settings(tmp_path, llm, bus={"queue_size": 1})
    slow_answer(llm, words=80)
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        dm = discord_fake.new_id()
        discord_fake.message_create(dm, USER_ID, "keep the inbox busy")
        reply = await live_reply(discord_fake, dm)
        press = discord_fake.press(reply.id, STOP, USER_ID)
        busy = await eventually(
            lambda: next(
                (m for m in discord_fake.interaction_messages(press.id) if "overloaded" in m.text), None
            ),
            what="the busy answer",
        )
        assert busy.ephemeral and "press it again" in busy.text
        await harness.idle(timeout=30)
        assert "word79" in reply.text and "Stopped" not in reply.text
        assert acknowledged_once(press)
        assert await harness.service.inbox.counts() == {"done": 1}, "the refused press was stored"


# --- approvals ---------------------------------------------------------------------------------------


@pytest.fixture
async def approvals(tmp_path: Path, llm: FakeOpenAI, discord_fake: FakeDiscord) -> AsyncIterator[Harness]:
    settings = agent_settings(tmp_path, llm, sandbox={"mode": "host"})
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        yield harness


async def risky_request(
    harness: Harness, fake: FakeDiscord, llm: FakeOpenAI, dm: str
) -> tuple[FakeMessage, str, Path]:
    """The model wants to run RISKY in a workspace with a build/ directory: the request and its id."""
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
        Reply(text="done with the build directory"),
    )
    fake.message_create(dm, USER_ID, "clean up the build")
    request = await eventually(
        lambda: next((m for m in fake.in_channel(dm) if "🔐 Approval needed" in m.text and m.buttons), None),
        timeout=30,
        what="the approval request",
    )
    assert RISKY in request.text
    match = ASKED.search(request.text)
    assert match is not None, request.text
    approval_id = match.group(1)
    styled = [(b["label"], b["custom_id"], b["style"]) for b in request.buttons]
    assert styled == [
        ("Approve", f"/approve {approval_id}", 1),
        ("Allow until /new", f"/approve {approval_id} session", 2),
        ("Deny", f"/deny {approval_id}", 4),
    ]
    [workspace] = Path(harness.service.settings.data_dir).glob("users/*/threads/*/user-data/workspace")
    assert (workspace / "build" / "out").exists()
    return request, approval_id, workspace


async def test_approve_by_button_runs_the_command_and_the_request_says_so(approvals, discord_fake, llm):
    dm = discord_fake.new_id()
    request, approval_id, workspace = await risky_request(approvals, discord_fake, llm, dm)
    press = discord_fake.press(request.id, "Approve", USER_ID)
    await final_reply(discord_fake, dm, "done with the build directory", timeout=30)
    await approvals.idle(timeout=20)
    assert not (workspace / "build").exists()
    assert "✅ Approved by" in request.text and RISKY in request.text
    assert request.components == [], "the buttons outlived the decision"
    assert tool_results(llm.completions[-1])[-1].startswith("[exit code 0]")
    assert press.callback_type == DEFERRED_UPDATE and acknowledged_once(press)
    assert not any(t.startswith(f"✅ Approved {approval_id}") for t in public_texts(discord_fake, dm))


async def test_deny_by_button_keeps_the_files_and_the_model_is_told(approvals, discord_fake, llm):
    dm = discord_fake.new_id()
    request, _, workspace = await risky_request(approvals, discord_fake, llm, dm)
    discord_fake.press(request.id, "Deny", USER_ID)
    await final_reply(discord_fake, dm, "done with the build directory", timeout=30)
    await approvals.idle(timeout=20)
    assert (workspace / "build" / "out").exists()
    assert "🚫 Denied by" in request.text and request.components == []
    assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))


# --- the fake's components ---------------------------------------------------------------------------


async def test_the_fake_validates_buttons_and_keeps_them_on_an_edit_that_leaves_them_out(discord_fake):
    url = f"{discord_fake.api_base_url}/channels/{discord_fake.channel_id}/messages"
    headers = {"Authorization": f"Bot {discord_fake.token}"}

    def row(*buttons: dict[str, object]) -> list[dict[str, object]]:
        return [{"type": 1, "components": list(buttons)}]

    def button(custom_id: str, label: str = "Go") -> dict[str, object]:
        return {"type": 2, "style": 1, "custom_id": custom_id, "label": label}

    refused = [
        row(button("x" * 101)),
        row(*(button(f"/b{i}") for i in range(6))),
        row(button("/same"), button("/same")),
        row(button("/long", "l" * 81)),
        [button("/bare")],  # a button outside an action row
        row(button("/a")) * 6,
    ]
    async with aiohttp.ClientSession(headers=headers) as session:
        for components in refused:
            async with session.post(url, json={"content": "hi", "components": components}) as response:
                assert response.status == 400 and (await response.json())["code"] == 50035, components
        async with session.post(url, json={"content": "hi", "components": row(button("/ok"))}) as response:
            assert response.status == 200
            sent = await response.json()
        message = discord_fake.messages[sent["id"]]
        async with session.patch(f"{url}/{sent['id']}", json={"content": "edited"}) as response:
            assert response.status == 200
        assert message.button_labels == ["Go"], "an edit without components removed the buttons"
        async with session.patch(f"{url}/{sent['id']}", json={"components": []}) as response:
            assert response.status == 200
        assert message.buttons == []
    with pytest.raises(LookupError):
        discord_fake.press(sent["id"], "Go", USER_ID)
