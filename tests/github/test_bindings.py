"""SCENARIOS 37–41: deliveries run once, bindings decide which agents fire, threads are stable."""

from __future__ import annotations

import asyncio

from tests.fakes.openai_server import Reply
from tests.github.conftest import (
    BOT,
    REPO,
    agent,
    comment_payload,
    github_settings,
    payload,
    running_service,
)
from webhooks.dispatch import thread_id_for


async def test_the_same_delivery_twice_runs_once_and_the_second_answer_says_duplicate(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    data = comment_payload(f"@{BOT} can you take a look?")
    async with running_service(settings) as sb:
        first = await sb.deliver("issue_comment", data, delivery="dup-1")
        await sb.idle()
        second = await sb.deliver("issue_comment", data, delivery="dup-1")
        await sb.idle()
    assert first.status_code == 200 and first.json()["duplicate"] is False
    assert first.json()["dispatch"]["fired"] == ["reviewer"]
    assert second.status_code == 200 and second.json()["duplicate"] is True
    assert len(llm.completions) == 1
    assert len(github.comments_on(REPO, 1)) == 1


async def test_the_same_delivery_arriving_twice_at_once_runs_once(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    data = comment_payload(f"@{BOT} race me")
    async with running_service(settings) as sb:
        responses = await asyncio.gather(
            *(sb.deliver("issue_comment", data, delivery="race-1") for _ in range(5))
        )
        await sb.idle()
    assert all(r.status_code == 200 for r in responses)
    assert sorted(r.json()["duplicate"] for r in responses) == [False, True, True, True, True]
    assert len(llm.completions) == 1
    assert len(github.comments_on(REPO, 1)) == 1


async def test_an_agent_can_use_its_own_model(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github, agents=[agent(model="smart")])
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} think hard"))
        await sb.idle()
    assert llm.completions[0]["model"] == "fake-smart"


MENTION_CASES = [
    (f"@{BOT} please review this", True),
    (f"Thanks!\n\ncc @{BOT}.", True),
    (f"@{BOT.upper()}: what do you think?", True),
    (f"@{BOT}-extra please review", False),
    (f"mail me at me@{BOT}.com", False),
    (f"write to @{BOT}.com", False),
    (f"the handle is `@{BOT}`, in code", False),
    ("no mention here at all", False),
]


async def test_a_comment_fires_the_agent_only_when_it_mentions_the_whole_login(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        for number, (body, fires) in enumerate(MENTION_CASES, start=10):
            response = await sb.deliver("issue_comment", comment_payload(body, number=number))
            dispatch = response.json()["dispatch"]
            assert dispatch["fired"] == (["reviewer"] if fires else []), body
            if not fires:
                assert dispatch["skipped"] == [{"agent": "reviewer", "reason": f"@{BOT} not mentioned"}], body
        await sb.idle()
    answered = {n for n, (_b, fires) in enumerate(MENTION_CASES, start=10) if fires}
    assert {n for n in range(10, 10 + len(MENTION_CASES)) if github.comments_on(REPO, n)} == answered


async def test_the_agents_own_comments_never_trigger_it(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        own = await sb.deliver(
            "issue_comment",
            comment_payload(f"@{BOT} done, see above", author=f"{BOT}[bot]", author_type="Bot"),
        )
        own_plain = await sb.deliver("issue_comment", comment_payload(f"@{BOT} again", author=BOT))
        await sb.idle()
    for response in (own, own_plain):
        assert response.json()["dispatch"]["fired"] == []
        assert response.json()["dispatch"]["skipped"] == [{"agent": "reviewer", "reason": "own event"}]
    assert llm.completions == []


async def test_other_bots_trigger_the_agent_unless_allow_authors_filters_them(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver(
            "issue_comment",
            comment_payload(f"@{BOT} new release", author="dependabot[bot]", author_type="Bot"),
        )
        await sb.idle()
    assert response.json()["dispatch"]["fired"] == ["reviewer"]

    filtered = github_settings(
        tmp_path / "filtered",
        llm,
        github,
        agents=[
            agent(
                bindings=[
                    {
                        "repo": REPO,
                        "triggers": {
                            "issue_comment": {"require_mention": True, "allow_authors": ["Codertocat"]}
                        },
                    }
                ]
            )
        ],
    )
    async with running_service(filtered) as sb:
        bot = await sb.deliver(
            "issue_comment",
            comment_payload(f"@{BOT} new release", author="dependabot[bot]", author_type="Bot"),
        )
        human = await sb.deliver("issue_comment", comment_payload(f"@{BOT} please check"))
        await sb.idle()
    assert bot.json()["dispatch"]["skipped"] == [
        {"agent": "reviewer", "reason": "author @dependabot[bot] is not in allow_authors"}
    ]
    assert human.json()["dispatch"]["fired"] == ["reviewer"]


async def test_a_new_issue_triggers_without_a_mention(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver("issues", payload("issues.opened"))
        await sb.idle()
    assert response.json()["dispatch"]["fired"] == ["reviewer"]
    prompt = llm.completions[0]["messages"][-1]["content"]
    assert "New issue Codertocat/Hello-World#1" in prompt
    assert "https://github.com/Codertocat/Hello-World/issues/1" in prompt


async def test_pull_request_opened_triggers_by_default_but_synchronize_does_not(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        opened = await sb.deliver("pull_request", payload("pull_request.opened"))
        pushed = await sb.deliver("pull_request", payload("pull_request.synchronize"))
        await sb.idle()
    assert opened.json()["dispatch"]["fired"] == ["reviewer"]
    assert pushed.json()["handled"] is True
    assert pushed.json()["dispatch"]["fired"] == []
    assert "synchronize is not a trigger" in pushed.json()["dispatch"]["skipped"][0]["reason"]
    assert len(llm.completions) == 1
    assert "Pull request Codertocat/Hello-World#2" in llm.completions[0]["messages"][-1]["content"]


async def test_synchronize_triggers_when_the_binding_asks_for_it(tmp_path, llm, github):
    binding = {"repo": REPO, "triggers": {"pull_request": {"actions": ["opened", "synchronize"]}}}
    settings = github_settings(tmp_path, llm, github, agents=[agent(bindings=[binding])])
    async with running_service(settings) as sb:
        pushed = await sb.deliver("pull_request", payload("pull_request.synchronize"))
        comment = await sb.deliver("issue_comment", comment_payload(f"@{BOT} hi"))
        await sb.idle()
    assert pushed.json()["dispatch"]["fired"] == ["reviewer"]
    # Listing triggers replaces the defaults: comments are not a trigger for this binding any more.
    assert comment.json()["dispatch"]["fired"] == []


async def test_an_agent_bound_to_another_repo_is_skipped_with_the_reason(tmp_path, llm, github):
    settings = github_settings(tmp_path, llm, github, agents=[agent(bindings=[{"repo": "someone/else"}])])
    async with running_service(settings) as sb:
        response = await sb.deliver("issue_comment", comment_payload(f"@{BOT} hi"))
    assert response.json()["dispatch"]["skipped"] == [
        {"agent": "reviewer", "reason": "not bound to Codertocat/Hello-World"}
    ]


async def test_two_agents_on_one_repo_get_distinct_threads_that_are_stable_across_deliveries(
    tmp_path, llm, github
):
    agents = [agent("reviewer"), agent("triager", bot_login="triage-bot")]
    settings = github_settings(tmp_path, llm, github, agents=agents)
    both = f"@{BOT} and @triage-bot, what do you think?"
    async with running_service(settings) as sb:
        llm.script(Reply(text="reviewer: first answer"), Reply(text="triager: first answer"))
        first = await sb.deliver("issue_comment", comment_payload(both))
        await sb.idle()
        second = await sb.deliver("issue_comment", comment_payload(f"@{BOT} one more thing"))
        await sb.idle()
        threads = sb.service.threads
        reviewer = await threads.get(("github", REPO, "1", "reviewer"))
        triager = await threads.get(("github", REPO, "1", "triager"))
    assert sorted(first.json()["dispatch"]["fired"]) == ["reviewer", "triager"]
    assert second.json()["dispatch"]["fired"] == ["reviewer"]
    assert reviewer.thread_id != triager.thread_id
    assert reviewer.thread_id == thread_id_for(REPO, 1, "reviewer", "github:reviewer")
    assert triager.thread_id == thread_id_for(REPO, 1, "triager", "github:triager")
    # The reviewer's second turn continues its own thread: the model sees its first exchange.
    third_request = llm.completions[2]["messages"]
    seen = " ".join(str(m.get("content")) for m in third_request)
    assert "one more thing" in seen
    assert ("reviewer: first answer" in seen) != ("triager: first answer" in seen)
    # Each agent answered in its own comment on the issue.
    assert len(github.comments_on(REPO, 1)) == 3


async def test_a_delivery_without_any_installation_is_skipped_with_the_reason(tmp_path, llm, github):
    data = comment_payload(f"@{BOT} hi")
    del data["installation"]
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver("issue_comment", data)
    [skipped] = response.json()["dispatch"]["skipped"]
    assert skipped["agent"] == "reviewer" and "no installation id" in skipped["reason"]
    assert llm.completions == []
