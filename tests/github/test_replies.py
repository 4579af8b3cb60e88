"""SCENARIO 42 end to end: a signed mention → App token minted from a local RSA key → one comment
created ("working on it…") and edited to the model's answer, through githubkit against the fake API."""

from __future__ import annotations

import json

from channels.types import InboundMessage, Sender
from tests.fakes.openai_server import Reply, ToolCall
from tests.github.conftest import (
    BOT,
    INSTALLATION,
    REPO,
    agent,
    comment_payload,
    github_settings,
    payload,
    running_service,
)
from webhooks.channel import WORKING_TEXT
from webhooks.dispatch import build_message
from webhooks.events import parse_event

ANSWER = "The leak is in `hello.py`: the file handle is never closed.\n\n```python\nwith open(p) as f:\n    data = f.read()\n```"


async def test_a_signed_mention_is_answered_in_one_comment_created_then_edited_to_the_answer(
    tmp_path, llm, github, caplog
):
    llm.script(Reply(text=ANSWER, chunk_size=5, delay=0.01))
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver("issue_comment", comment_payload(f"@{BOT} why does this leak memory?"))
        await sb.idle()

    assert response.status_code == 200
    [comment] = github.comments_on(REPO, 1)
    assert comment.history[0] == WORKING_TEXT
    assert comment.body == ANSWER
    assert comment.user == f"{BOT}[bot]"
    # Minted once with an RS256 App JWT the fake verified against our public key; every call succeeded.
    assert [m["installation"] for m in github.minted] == [INSTALLATION]
    assert [c["kind"] for c in github.calls()][:2] == ["token", "create_comment"]
    assert all(c["status"] < 300 for c in github.calls())
    # The model got the agent's system prompt and a compact prompt with the comment and its link.
    messages = llm.completions[0]["messages"]
    assert messages[0]["role"] == "system" and "You are reviewer" in messages[0]["content"]
    prompt = messages[-1]["content"]
    assert "why does this leak memory?" in prompt
    assert "https://github.com/Codertocat/Hello-World/issues/1#issuecomment-492700400" in prompt
    # The installation token is in neither the prompt nor the logs.
    [token] = list(github.tokens)
    assert token not in json.dumps(llm.completions)
    assert all(token not in record.getMessage() for record in caplog.records)


async def test_the_installation_token_is_cached_across_deliveries(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} first", number=1))
        await sb.idle()
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} second", number=2))
        await sb.idle()
    assert len(github.minted) == 1
    assert len(github.comments_on(REPO, 1)) == 1 and len(github.comments_on(REPO, 2)) == 1


async def test_a_token_close_to_expiry_is_refreshed_before_it_is_used(tmp_path, llm, github):
    github.token_ttl = 200  # inside the 5-minute refresh margin: never reused
    llm.script(Reply(text="first answer"), Reply(text="second answer"))
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} first", number=1))
        await sb.idle()
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} second", number=2))
        await sb.idle()
    assert len(github.minted) >= 2
    assert all(c["status"] < 300 for c in github.calls())
    assert github.comments_on(REPO, 2)[0].body == "second answer"


async def test_a_configured_installation_id_wins_over_the_payloads(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github, agents=[agent(installation_id=31337)])
    async with running_service(settings) as sb:
        await sb.deliver("pull_request", payload("pull_request.opened"))
        await sb.idle()
    assert [m["installation"] for m in github.minted] == [31337]
    [comment] = github.comments_on(REPO, 2)
    assert "Pull request Codertocat/Hello-World#2" in comment.body  # the echo model repeats the prompt


async def test_run_secrets_give_the_run_a_gh_token_and_nothing_without_an_installation(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        event = parse_event("issue_comment", comment_payload(f"@{BOT} hi"))
        message = build_message("d-1", event, settings.channels.github.agents[0])
        secrets = await sb.channel.run_secrets(message)
        other = InboundMessage(
            "github", REPO, "1", Sender("1"), "hi", "x", context={"repo": REPO, "number": 1}
        )
        assert await sb.channel.run_secrets(other) == {}
    assert list(secrets) == ["GH_TOKEN"]
    assert secrets["GH_TOKEN"] in github.tokens


async def test_a_rate_limited_edit_waits_and_the_final_answer_still_lands(tmp_path, llm, github):
    llm.script(Reply(text="final answer after a rate limit", chunk_size=4, delay=0.02))
    github.fail_next(
        "edit_comment", 403, headers={"Retry-After": "1"}, message="You have exceeded a secondary rate limit"
    )
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} go"))
        await sb.idle()
    [comment] = github.comments_on(REPO, 1)
    assert comment.body == "final answer after a rate limit"
    assert any(c["kind"] == "edit_comment" and c["status"] == 403 for c in github.calls())


async def test_a_deleted_comment_gets_the_answer_as_a_new_comment(tmp_path, llm, github):
    llm.script(Reply(text="answer for a deleted placeholder"))
    github.fail_next("edit_comment", 404, message="Not Found", times=10)
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} go"))
        await sb.idle()
    comments = github.comments_on(REPO, 1)
    assert comments[-1].body == "answer for a deleted placeholder"
    assert len(comments) == 2


async def test_gh_token_reaches_sandbox_commands_but_is_masked_in_what_anyone_sees(tmp_path, llm, github):
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo -n $GH_TOKEN | wc -c; echo $GH_TOKEN"})]),
        Reply(text="I checked the token."),
    )
    settings = github_settings(tmp_path, llm, github)
    # Reading $GH_TOKEN in a command asks for approval (an encoded copy would get past masking); this
    # test is about masking, so nothing is asked here.
    settings.sandbox.approval = "never"
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} check your access"))
        await sb.idle()
    [token] = list(github.tokens)
    tool_result = next(m for m in llm.completions[1]["messages"] if m["role"] == "tool")
    assert str(len(token)) in tool_result["content"]  # the command saw the real value
    assert token not in tool_result["content"]  # ...and its output was masked
    assert token not in json.dumps(llm.completions)
    [comment] = github.comments_on(REPO, 1)
    assert all(token not in version for version in comment.history)
    assert comment.body == "I checked the token."


async def test_a_follow_up_while_the_agent_works_is_queued_and_answered_after_it(tmp_path, llm, github):
    llm.script(Reply(text="first answer"), Reply(text="second answer"))
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        github.pause("edit_comment")  # the first answer cannot land yet: its turn stays busy
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} first question"))
        await github.wait_for(lambda: llm.completions)
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} and a follow-up"))
        await github.wait_for(lambda: len(github.comments_on(REPO, 1)) == 2)
        github.resume("edit_comment")
        await sb.idle()
    first, second = sorted(github.comments_on(REPO, 1), key=lambda c: c.id)
    assert first.body == "first answer"
    assert second.history[0].startswith("⏳ Queued")
    assert second.body == "second answer"
    assert "and a follow-up" in llm.completions[1]["messages"][-1]["content"]


async def test_doctor_check_signs_in_as_the_app_and_explains_a_wrong_key(tmp_path, llm, github):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from webhooks.channel import GitHubChannel

    settings = github_settings(tmp_path, llm, github)
    assert await GitHubChannel(settings.channels.github, settings=settings).check() is None

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    wrong = tmp_path / "wrong.pem"
    wrong.write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    settings.channels.github.private_key_path = str(wrong)
    problem = await GitHubChannel(settings.channels.github, settings=settings).check()
    assert problem is not None and "GitHub App sign-in failed" in problem and "401" in problem


async def test_a_revoked_token_is_replaced_and_the_answer_still_lands(tmp_path, llm, github):
    llm.script(Reply(text="answer with a fresh token"))
    github.fail_next("create_comment", 401, message="Bad credentials")
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} go"))
        await sb.idle()
    [comment] = github.comments_on(REPO, 1)
    assert comment.body == "answer with a fresh token"
    assert len(github.minted) == 2
