"""Issue 34: named agents' configuration — what is refused, with which sentence, and what still loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent.tools import TOOLS
from bot.clicmds.configcmd import collect
from config import ConfigError, load_settings
from config.agents import BUILTIN_TOOLS

MISTAKES = {
    "models": [{"name": "default", "api_key": "sk-x"}, {"name": "smart", "api_key": "sk-x"}],
    "mcp_servers": [{"name": "files", "command": "files-server"}],
    "agents": [
        {"name": "ops", "model": "gpt-5-huge", "mcp_servers": ["filez"]},
        {"name": "writer", "tools": ["read_file", "bsh"]},
        {"name": "helper", "fallback_models": ["smart", "tiny"]},
    ],
    "bindings": [{"agent": "ops", "provider": "slack"}, {"agent": "opps", "chat": "C1"}],
}


def test_config_check_names_each_dangling_agent_reference_on_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(MISTAKES))
    problems, _ = collect(str(path))
    assert problems == [
        "agents.1.tools: unknown tool(s) bsh; built-in tools are " + ", ".join(sorted(BUILTIN_TOOLS)),
    ]
    del MISTAKES["agents"][1]["tools"]  # type: ignore[index]
    path.write_text(yaml.safe_dump(MISTAKES))
    problems, _ = collect(str(path))
    assert problems == [
        "agents.0 (ops): unknown model 'gpt-5-huge'; models are default, smart",
        "agents.0 (ops): unknown MCP server 'filez' (mcp_servers: files)",
        "agents.2 (helper): unknown model 'tiny'; models are default, smart",
        "bindings.1: binding to unknown agent 'opps' (helper, ops, writer)",
    ]


def test_a_single_problem_is_one_line_too_and_a_binding_needs_a_known_agent() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides={"bindings": [{"agent": "ghost"}]}, env={})
    assert caught.value.problems == [
        "bindings.0: binding to unknown agent 'ghost' (no agents are configured)"
    ]


def test_a_github_app_may_name_an_agent_and_a_wrong_name_is_refused() -> None:
    github = {
        "enabled": True,
        "allow_unsigned_webhooks": True,
        "agents": [{"name": "bot", "bot_login": "b[bot]", "agent": "reviewer"}],
    }
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides={"channels": {"github": github}}, env={})
    assert caught.value.problems == ["channels.github.agents (bot): agent 'reviewer' is not in agents"]
    settings = load_settings(
        overrides={"channels": {"github": github}, "agents": [{"name": "reviewer"}]}, env={}
    )
    assert settings.channels.github.agents[0].agent == "reviewer"


def test_context_is_mentions_or_a_bounded_ambient_window() -> None:
    settings = load_settings(
        overrides={"agents": [{"name": "a"}, {"name": "b", "context": {"ambient": 5}}]}, env={}
    )
    assert [a.ambient for a in settings.agents] == [0, 5]
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides={"agents": [{"name": "c", "context": {"ambient": 500}}]}, env={})
    assert any("less than or equal to 50" in p for p in caught.value.problems), caught.value.problems


def test_the_configs_tool_names_are_the_runtimes() -> None:
    assert set(TOOLS) == BUILTIN_TOOLS
