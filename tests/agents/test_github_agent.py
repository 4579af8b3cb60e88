"""Issue 34: a GitHub App expressed by a named agent — its prompt and tools — with repos bound as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.agents import AgentBinding, NamedAgent
from tests.agent.helpers import all_tool_results, system_text
from tests.fakes.github import FakeGitHub
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.github.conftest import BOT, app_key, comment_payload, github, github_settings, running_service

__all__ = ["app_key", "github"]  # the GitHub kit's fixtures, used here

pytestmark = pytest.mark.slow  # fake GitHub and model servers


async def test_a_github_app_naming_an_agent_answers_with_its_prompt_and_without_bash(
    tmp_path: Path, llm: FakeOpenAI, github: FakeGitHub
) -> None:
    settings = github_settings(tmp_path, llm, github)
    settings.agents = [
        NamedAgent(
            name="careful", system_prompt="You are Careful; you never run commands.", tools=["read_file"]
        )
    ]
    settings.channels.github.agents[0].agent = "careful"
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "id"})]), Reply(text="Reviewed."))
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} please review"))
        await sb.idle()
    first = llm.completions[0]
    prompt = system_text(first)
    assert prompt.startswith("You are Careful; you never run commands.")
    assert "Hello-World" in prompt  # GitHub's own prompt (the repository and issue) still follows
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file"]
    [refusal] = all_tool_results(llm)
    assert refusal.startswith("Refused: `bash` is not available in this conversation: the agent careful")


async def test_the_default_binding_does_not_reach_a_github_app_that_names_no_agent(
    tmp_path: Path, llm: FakeOpenAI, github: FakeGitHub
) -> None:
    settings = github_settings(tmp_path, llm, github)
    settings.agents = [NamedAgent(name="chat", system_prompt="You are Chat.", tools=["ls"])]
    settings.bindings = [AgentBinding(agent="chat")]
    async with running_service(settings) as sb:
        await sb.deliver("issue_comment", comment_payload(f"@{BOT} please review"))
        await sb.idle()
    [request] = llm.completions
    assert "You are Chat." not in system_text(request)
    assert "bash" in [t["function"]["name"] for t in request["tools"]]
