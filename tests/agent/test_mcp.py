"""Issue 18 (MCP): tools of a real MCP server (official SDK, stdio) become agent tools; a broken one is
reported and never stops the service."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agent.helpers import agent_settings, all_tool_results, everything_shown
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.harness import Harness

pytestmark = pytest.mark.slow  # each test starts real MCP server processes

FAKES = Path(__file__).resolve().parents[1] / "fakes"
SERVER = str(FAKES / "mcp_server.py")


def server(name: str, *extra: str, **overrides: Any) -> dict[str, Any]:
    # The isolated server may read only the interpreter (and its packages) and its own folder.
    base = {
        "name": name,
        "command": sys.executable,
        "args": [SERVER, *extra],
        "mounts": [sys.prefix, str(FAKES)],
    }
    return base | overrides


def mcp_settings(tmp_path: Path, llm: FakeOpenAI, *servers: dict[str, Any], **extra: Any):  # type: ignore[no-untyped-def]
    return agent_settings(tmp_path, llm, mcp_servers=list(servers), **extra)


async def test_the_model_calls_an_mcp_tool_and_the_answer_reaches_the_chat(tmp_path, llm):
    llm.script(
        Reply(tool_calls=[ToolCall("calc__add", {"a": 20, "b": 22})]),
        Reply(text="20 + 22 is 42."),
    )
    async with Harness.running(mcp_settings(tmp_path, llm, server("calc"))) as h:
        answer = await h.ask("what is 20 + 22?")
    offered = [t["function"] for t in llm.completions[0]["tools"]]
    add = next(t for t in offered if t["name"] == "calc__add")
    assert add["description"] == "[calc] Add two integers."
    assert set(add["parameters"]["properties"]) == {"a", "b"}
    assert "calc__whoami" in [t["name"] for t in offered]
    assert all_tool_results(llm) == ["42"]
    assert answer == "20 + 22 is 42."
    assert any("⏳ calling calc__add" in text for text in everything_shown(h.chat))


async def test_an_isolated_server_sees_neither_the_data_directory_nor_the_services_secrets(
    tmp_path, llm, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-mcp-must-not-see-this")
    probe = str(tmp_path / "data" / "switchboard.db")
    llm.script(Reply(tool_calls=[ToolCall("calc__whoami", {"probe": probe})]), Reply(text="ok"))
    async with Harness.running(mcp_settings(tmp_path, llm, server("calc", env={"ONLY_THIS": "1"}))) as h:
        await h.ask("who are you?")
    assert Path(probe).exists()  # it is there on the host
    [result] = all_tool_results(llm)
    assert "exists=False" in result
    assert "ONLY_THIS" in result and "OPENAI_API_KEY" not in result
    assert "uid=0 " not in result


async def test_bad_arguments_and_a_broken_server_give_clear_results_and_the_bot_still_answers(tmp_path, llm):
    llm.script(Reply(tool_calls=[ToolCall("calc__add", {"a": "many"})]), Reply(text="That did not work."))
    settings = mcp_settings(tmp_path, llm, server("calc"), server("broken", "--crash"))
    async with Harness.running(settings) as h:
        status = (await h.service.health())["mcp"]
        tools = await h.ask("/tools")
        answer = await h.ask("add something")
        plain = await h.ask("hello?")
    assert status["calc"] == "ok (3 tools)"
    assert status["broken"].startswith("error: ")
    assert "• calc__add — [calc] Add two integers" in tools
    assert "MCP servers: calc: ok (3 tools); broken: error: " in tools
    [result] = all_tool_results(llm)[:1]
    assert result.startswith("Error: ") and "validation error" in result
    assert answer == "That did not work."
    assert plain == "echo: hello?"
    assert not any(t["function"]["name"].startswith("broken__") for t in llm.completions[0]["tools"])


async def test_a_slow_tool_call_times_out_with_a_plain_sentence(tmp_path, llm):
    llm.script(Reply(tool_calls=[ToolCall("calc__wait", {"seconds": 5})]), Reply(text="Too slow."))
    async with Harness.running(mcp_settings(tmp_path, llm, server("calc", timeout_seconds=1))) as h:
        answer = await h.ask("take your time")
    assert all_tool_results(llm) == ["Error: calc__wait did not answer within 1 s"]
    assert answer == "Too slow."


def test_doctor_starts_each_mcp_server_and_says_which_work(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        f"data_dir: {tmp_path / 'data'}\n"
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path / 'sb.db'}'}}\n"
        "models: [{name: default, model: m, api_key: sk-x, base_url: 'http://127.0.0.1:9/v1'}]\n"
        f"mcp_servers:\n"
        f"  - {{name: calc, command: {sys.executable}, args: [{SERVER}], mounts: [{sys.prefix}, {FAKES}]}}\n"
        f"  - {{name: broken, command: {sys.executable}, args: [{SERVER}, --crash], mounts: [{sys.prefix}, {FAKES}]}}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "bot", "doctor", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "✓ mcp server calc: ok (3 tools)" in result.stdout
    assert "✗ mcp server broken: error: " in result.stdout


async def test_a_server_in_a_venv_made_from_a_python_outside_usr_starts_isolated(tmp_path, llm):
    # A venv holds links to the interpreter it was made from (here this machine's own Python: pyenv,
    # uv or conda, not /usr) and a pyvenv.cfg naming it; only the venv and the server's folder are
    # given as mounts, as an operator would write them.
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        check=True,
        timeout=120,
    )
    python = venv / "bin" / "python"
    assert not Path(os.path.realpath(python)).is_relative_to(venv)  # the interpreter is elsewhere
    llm.script(Reply(tool_calls=[ToolCall("calc__add", {"a": 2, "b": 3})]), Reply(text="5."))
    calc = server("calc", command=str(python), mounts=[str(venv), str(FAKES)])
    async with Harness.running(mcp_settings(tmp_path, llm, calc)) as h:
        status = (await h.service.health())["mcp"]
        answer = await h.ask("what is 2 + 3?")
    assert status["calc"] == "ok (3 tools)"
    assert all_tool_results(llm) == ["5"]
    assert answer == "5."
