"""Issue 28 on Slack: everybody in the bot's team is a member; a Slack Connect guest (a person of another
organisation in a shared channel) is a guest, answered without tools that act (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.doctor import run_doctor
from tests.agent.helpers import tool_results
from tests.channels.slack.conftest import running_bot, slack_section
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.slack import FakeSlack


async def test_a_slack_connect_guest_gets_no_shell_but_a_team_member_does(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack
) -> None:
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo from-the-shell"})]),
        Reply(text="Guest answer."),
        Reply(tool_calls=[ToolCall("bash", {"command": "echo from-the-shell"})]),
        Reply(text="Member answer."),
    )
    async with running_bot(tmp_path, llm, slack, trust={}):  # the production defaults
        slack.mention("C0SHARED", "UOUTSIDER", "run the shell", user_team="T0OTHERORG")
        await slack.wait_for_text("Guest answer.", "C0SHARED")
        slack.mention("C0SHARED", "UCOLLEAGUE", "run the shell")
        await slack.wait_for_text("Member answer.", "C0SHARED")
    guest_result = tool_results(llm.completions[1])
    member_result = tool_results(llm.completions[3])
    assert len(guest_result) == 1 and guest_result[0].startswith("Refused: `bash` is not available")
    assert member_result == ["[exit code 0]\nfrom-the-shell"]


async def test_doctor_says_who_can_approve_a_pairing_code(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    without = make_settings(tmp_path, llm, channels={"slack": slack_section(slack, trust={})})
    assert await run_doctor(without) == 0
    assert (
        "✓ trust slack: strangers — private chats: pair, groups: chat_only; no channels.slack.admins, so only "
        "`switchboard pair approve slack CODE` approves a pairing code"
    ) in capsys.readouterr().out
    with_admin = make_settings(
        tmp_path, llm, channels={"slack": slack_section(slack, trust={}, admins=["U0BOSS"])}
    )
    assert await run_doctor(with_admin) == 0
    assert (
        "✓ trust slack: strangers — private chats: pair, groups: chat_only; 1 admin(s)"
        in capsys.readouterr().out
    )
