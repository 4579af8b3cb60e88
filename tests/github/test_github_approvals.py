"""Approving a risky command from a GitHub comment (issue 28): ``@bot /approve ID`` (or a bare
``/approve ID``) by a collaborator decides the waiting request at once — it is the chat command, not a
new turn queued behind the one that waits — and a guest's comment never decides anything."""

from __future__ import annotations

import re
from pathlib import Path

from tests.agent.helpers import all_tool_results
from tests.fakes.github import FakeComment, FakeGitHub
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.github.conftest import BOT, REPO, agent, comment_payload, github_settings, running_service
from tests.github.test_trust import issue_payload

RISKY = "rm -rf /mnt/user-data/workspace/build"
ASKED = re.compile(r"/approve ([A-Z2-9]{6})")
ANSWER = "Removed the stale build directory."


def script_risky_turn(llm: FakeOpenAI) -> None:
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
        Reply(text=ANSWER),
    )


async def approval_request(github: FakeGitHub) -> tuple[FakeComment, str]:
    """The bot's "approval needed" comment on issue #1, once posted, and the id it asks for."""
    request: FakeComment = await github.wait_for(
        lambda: next((c for c in github.comments_on(REPO, 1) if c.body.startswith("🔐")), None), timeout=30
    )
    assert RISKY in request.body
    match = ASKED.search(request.body)
    assert match is not None, request.body
    return request, match.group(1)


def history(github: FakeGitHub) -> list[str]:
    return [text for c in sorted(github.comments_on(REPO, 1), key=lambda c: c.id) for text in c.history]


async def test_a_collaborators_approve_comment_runs_the_waiting_command_and_a_guests_does_not(
    tmp_path, llm, github
):
    script_risky_turn(llm)
    settings = github_settings(tmp_path, llm, github, sandbox={"mode": "host"})
    async with running_service(settings) as sb:
        await sb.deliver(
            "issues",
            issue_payload(
                "The build dir is stale; clean it.", author="alice", association="MEMBER", author_id=42
            ),
        )
        request, approval_id = await approval_request(github)
        [workspace] = Path(settings.data_dir).glob("users/*/threads/*/user-data/workspace")
        assert (workspace / "build" / "out").exists()  # waiting: nothing ran yet

        outsider = await sb.deliver(
            "issue_comment",
            comment_payload(
                f"@{BOT} /approve {approval_id}", author="mallory", association="NONE", author_id=666
            ),
        )
        assert outsider.json()["dispatch"]["fired"] == []
        assert (workspace / "build" / "out").exists()

        approved = await sb.deliver(
            "issue_comment",
            comment_payload(
                f"@{BOT} /approve {approval_id}", author="bob", association="COLLABORATOR", author_id=7
            ),
        )
        assert approved.json()["dispatch"]["fired"] == ["reviewer"]
        await github.wait_for(lambda: ANSWER in [c.body for c in github.comments_on(REPO, 1)])
        await sb.idle()

    assert not (workspace / "build").exists()
    assert all_tool_results(llm)[-1].startswith("[exit code 0]")
    said = history(github)
    assert f"✅ Approved {approval_id} — running it." in said
    assert "Approved by bob" in request.body  # the request itself now says who decided
    assert not any(text.startswith("⏳ Queued") for text in said)  # the decision was never a turn
    assert len(llm.completions) == 3  # the decision took no model call


async def test_a_bare_deny_comment_refuses_and_a_chatting_guests_approve_is_refused(tmp_path, llm, github):
    script_risky_turn(llm)
    settings = github_settings(
        tmp_path, llm, github, agents=[agent(guests="chat_only")], sandbox={"mode": "host"}
    )
    async with running_service(settings) as sb:
        await sb.deliver(
            "issues",
            issue_payload(
                "The build dir is stale; clean it.", author="alice", association="OWNER", author_id=42
            ),
        )
        _, approval_id = await approval_request(github)
        [workspace] = Path(settings.data_dir).glob("users/*/threads/*/user-data/workspace")

        guest = await sb.deliver(
            "issue_comment",
            comment_payload(
                f"/approve {approval_id} please", author="mallory", association="NONE", author_id=666
            ),
        )
        assert guest.json()["dispatch"]["trust"][0]["level"] == "guest"
        await github.wait_for(lambda: any("/approve is only for members" in t for t in history(github)))
        assert (workspace / "build" / "out").exists()

        await sb.deliver(
            "issue_comment",
            comment_payload(f"/deny {approval_id}", author="bob", association="COLLABORATOR", author_id=7),
        )
        await github.wait_for(lambda: ANSWER in [c.body for c in github.comments_on(REPO, 1)])
        await sb.idle()

    assert (workspace / "build" / "out").exists()
    assert any("[not run] The user denied this command" in r for r in all_tool_results(llm))
    assert f"🚫 Denied {approval_id}." in history(github)


async def test_only_a_decision_addressed_to_the_agent_or_to_nobody_is_one(tmp_path, llm, github):
    """A mention of another bot, a word that merely starts like the command, or the command inside a
    sentence is no decision: without a mention of the agent such a comment fires nothing."""
    settings = github_settings(tmp_path, llm, github)
    texts = ["@other-bot /approve K7PX2M", "/approved it yesterday", "I will /approve K7PX2M later"]
    async with running_service(settings) as sb:
        answers = [
            (
                await sb.deliver(
                    "issue_comment",
                    comment_payload(text, author="bob", association="COLLABORATOR", author_id=7),
                )
            ).json()["dispatch"]
            for text in texts
        ]
        decided = await sb.deliver(
            "issue_comment",
            comment_payload("/deny K7PX2M", author="bob", association="COLLABORATOR", author_id=7),
        )
        await github.wait_for(lambda: github.comments_on(REPO, 1))
        await sb.idle()
    assert [a["fired"] for a in answers] == [[], [], []]
    assert decided.json()["dispatch"]["fired"] == ["reviewer"]
    [reply] = github.comments_on(REPO, 1)
    assert reply.body == "There is no approval request K7PX2M."
    assert llm.completions == []
