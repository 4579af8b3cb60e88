"""The ACP client (agent/acp) and the sandbox's live processes, against the fake ACP agent.

The fake (tests/fakes/acp_agent.py) is written from the protocol's description, and the first tests hold
it to that: it refuses what an ACP agent refuses. The rest run our client on the real sandbox (host and
bwrap) with the task's hooks as plain callbacks: file requests outside the thread's files are refused,
and an agent that is not one (or dies) ends the task ``failed`` with a sentence that says why.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.acp.client import Hooks, run_acp
from agent.paths import ThreadPaths
from agent.sandbox import LocalSandboxProvider, Sandbox, SandboxProvider
from agent.sandbox_bwrap import BwrapSandboxProvider
from config.schema import SandboxConfig, SubagentProfileConfig
from tests.fakes import acp_agent

SOURCE = Path(acp_agent.__file__).read_text()
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
AGENT = [PYTHON, "-I", "-c", SOURCE]


async def talk(lines: list[Any]) -> list[dict[str, Any]]:
    """Send raw lines to the fake agent (a host process) and read its answers until it ends."""
    process = await asyncio.create_subprocess_exec(
        *AGENT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    data = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    out, _ = await asyncio.wait_for(process.communicate(data.encode()), 30)
    return [json.loads(line) for line in out.decode().splitlines()]


def rpc(ident: int, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}


INIT = rpc(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})


async def test_the_fake_agent_refuses_what_the_protocol_refuses():
    answers = await talk(
        [
            "{not json",
            {"id": 2, "method": "initialize"},  # no "jsonrpc": "2.0"
            rpc(3, "session/new", {"cwd": "/tmp", "mcpServers": []}),  # before initialize
            INIT,
            rpc(4, "session/new", {"cwd": "relative/dir", "mcpServers": []}),
            rpc(5, "session/new", {"cwd": "/tmp"}),
            rpc(6, "session/fly", {}),
            rpc(7, "session/prompt", {"sessionId": "nobody", "prompt": []}),
            rpc(8, "session/new", {"cwd": "/tmp", "mcpServers": []}),
        ]
    )
    codes = [(a.get("id"), a["error"]["code"]) for a in answers if "error" in a]
    assert codes == [
        (None, -32700),
        (2, -32600),
        (3, -32600),
        (4, -32602),
        (5, -32602),
        (6, -32601),
        (7, -32602),
    ]
    [hello] = [a for a in answers if a.get("id") == 1]
    assert hello["result"]["protocolVersion"] == 1
    assert [a["result"] for a in answers if a.get("id") == 8] == [{"sessionId": "sess-1"}]


@asynccontextmanager
async def sandbox_of(tmp_path: Path, mode: str) -> AsyncIterator[tuple[Sandbox, ThreadPaths]]:
    provider: SandboxProvider = (
        LocalSandboxProvider() if mode == "host" else BwrapSandboxProvider(SandboxConfig(mode="bwrap"))
    )
    await provider.start()
    paths = ThreadPaths(tmp_path / "data", "owner-1", "thread-1")
    sandbox = await provider.acquire(paths)
    try:
        yield sandbox, paths
    finally:
        await sandbox.release()
        await provider.close()


class Calls:
    """The task's side, as plain callbacks: card steps and a person who always says ``yes``."""

    def __init__(self, yes: bool = True) -> None:
        self.yes = yes
        self.steps: list[tuple[str, str]] = []
        self.asked: list[str] = []

    def hooks(self) -> Hooks:
        async def approve(what: str, _why: str) -> bool:
            self.asked.append(what)
            return self.yes

        return Hooks(step=lambda kind, text: self.steps.append((kind, text)), approve=approve, mask=str)


@pytest.mark.parametrize("mode", ["bwrap", "host"])
@pytest.mark.parametrize("target", ["/etc/acp-escape.txt", "../../../../acp-escape.txt", "../uploads/x.txt"])
async def test_file_writes_outside_the_threads_writable_files_are_refused(
    tmp_path: Path, mode: str, target: str
):
    calls = Calls()
    async with sandbox_of(tmp_path, mode) as (sandbox, paths):
        result = await run_acp(sandbox, AGENT, f"WRITE {target}: escaped", calls.hooks())
        inside = sorted(p.name for p in paths.root.rglob("*") if p.is_file())
    assert result.status == "done"
    assert result.text.startswith("NOT WRITTEN:"), result.text
    assert inside == []
    assert not Path("/etc/acp-escape.txt").exists()
    assert not list(tmp_path.rglob("acp-escape.txt"))


@pytest.mark.parametrize("mode", ["bwrap", "host"])
async def test_an_allowed_write_lands_in_the_workspace_and_the_steps_tell_the_story(
    tmp_path: Path, mode: str
):
    calls = Calls()
    async with sandbox_of(tmp_path, mode) as (sandbox, paths):
        result = await run_acp(sandbox, AGENT, "WRITE sub/notes.txt: hello", calls.hooks())
        written = (paths.workspace / "sub" / "notes.txt").read_text()
    assert (result.status, result.text, result.tool_calls) == (
        "done",
        "WROTE notes.txt".replace("notes", "sub/notes"),
        1,
    )
    assert written == "hello"
    assert calls.asked == ['Write sub/notes.txt: {"path": "/mnt/user-data/workspace/sub/notes.txt"}']
    assert ("tool", "wrote /mnt/user-data/workspace/sub/notes.txt") in calls.steps
    assert calls.steps[0] == ("model", "I will write sub/notes.txt.")


async def test_a_command_that_is_no_acp_agent_fails_the_task_with_its_last_words(tmp_path: Path):
    calls = Calls()
    async with sandbox_of(tmp_path, "host") as (sandbox, _):
        result = await run_acp(
            sandbox, ["/bin/sh", "-c", "echo no such agent here >&2; exit 3"], "hi", calls.hooks()
        )
    assert result.status == "failed"
    assert result.text == "the coding agent ended before it finished (exit code 3): no such agent here"


def test_an_acp_profile_takes_a_command_and_no_model_or_tools():
    coder = SubagentProfileConfig(name="coder", description="d", acp={"command": ["codex-acp"]})  # type: ignore[arg-type]
    assert coder.acp is not None and coder.acp.command == ["codex-acp"]
    with pytest.raises(ValueError, match="model and tools do not apply"):
        SubagentProfileConfig(name="coder", description="d", model="m", acp={"command": ["x"]})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a system_prompt"):
        SubagentProfileConfig(name="plain", description="d")
    with pytest.raises(ValueError):
        SubagentProfileConfig(name="coder", description="d", acp={"command": []})  # type: ignore[arg-type]


KEY = "fk-" + "7" * 21  # a made-up API key


@pytest.mark.parametrize("mode", ["bwrap", "host"])
async def test_the_agent_gets_its_acp_env_and_bash_in_the_same_thread_does_not(tmp_path: Path, mode: str):
    async with sandbox_of(tmp_path, mode) as (sandbox, _):
        result = await run_acp(sandbox, AGENT, "ENV FAKE_KEY", Calls().hooks(), env={"FAKE_KEY": KEY})
        bash = await sandbox.run('echo "[${FAKE_KEY:-unset}]"', secrets={}, time_limit=30, max_output=2000)
    assert (result.status, result.text) == ("done", f"ENV FAKE_KEY set=yes length={len(KEY)}")
    assert bash.output.strip() == "[unset]", bash.output


def placed_outside_usr(tmp_path: Path) -> Path:
    """The fake agent as a file in a directory of its own outside /usr (as under /opt), readable by all."""
    folder = tmp_path / "opt" / "fake-agent"
    folder.mkdir(parents=True)
    script = folder / "acp_agent.py"
    script.write_text(SOURCE)
    for path in (tmp_path, tmp_path / "opt", folder):
        path.chmod(0o755)
    script.chmod(0o644)
    return script


async def test_a_mount_lets_the_agent_run_from_outside_usr_read_only_and_bash_never_sees_it(tmp_path: Path):
    script = placed_outside_usr(tmp_path)
    command = [PYTHON, "-I", str(script)]
    async with sandbox_of(tmp_path, "bwrap") as (sandbox, _):
        unmounted = await run_acp(sandbox, command, "WHERE", Calls().hooks())
        mounted = await run_acp(sandbox, command, "WHERE", Calls().hooks(), mounts=[str(script.parent)])
        bash = await sandbox.run(f"cat {script} | wc -c", secrets={}, time_limit=30, max_output=2000)
    assert unmounted.status == "failed"
    assert unmounted.text.startswith("the coding agent ended before it finished (exit code 2)"), (
        unmounted.text
    )
    assert (mounted.status, mounted.text) == ("done", f"RUNNING FROM {script}; beside it: read-only")
    assert not (script.parent / "planted").exists()
    assert "No such file or directory" in bash.output, bash.output


async def test_an_agent_that_wants_a_sign_in_fails_naming_acp_env(tmp_path: Path):
    command = [*AGENT, "--require", "FAKE_KEY"]
    async with sandbox_of(tmp_path, "host") as (sandbox, _):
        bare = await run_acp(sandbox, command, "hi", Calls().hooks())
        wrong = await run_acp(sandbox, command, "hi", Calls().hooks(), env={"OTHER_KEY": KEY})
        keyed = await run_acp(sandbox, command, "hi", Calls().hooks(), env={"FAKE_KEY": KEY})
    assert bare.status == wrong.status == "failed"
    assert bare.text == (
        "the coding agent needs to be signed in (Authentication required; it offers: API key). A chat"
        " cannot sign it in: give it its API key in the profile's acp.env (e.g. ANTHROPIC_API_KEY:"
        " ${ANTHROPIC_API_KEY}); acp.env gives it nothing"
    )
    assert wrong.text.endswith("acp.env gives it OTHER_KEY; check those values"), wrong.text
    assert (keyed.status, keyed.text) == ("done", "Nothing to do.")


def test_acp_env_and_mounts_are_checked_when_the_config_loads(tmp_path: Path):
    from config.loader import ConfigError, load_settings
    from config.secrets import known_secrets

    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")

    def load(acp: dict[str, Any], **top: Any) -> Any:
        profile = {"name": "coder", "description": "d", "acp": {"command": ["x"], **acp}}
        overrides = {"agent": {"subagents": {"profiles": [profile]}}, **top}
        return load_settings(config, env={"LOGIN_VALUE": "abcdefgh-login"}, overrides=overrides)

    settings = load(
        {"env": {"AGENT_LOGIN": "${LOGIN_VALUE}"}, "mounts": [f"{agent_dir}/"]}, data_dir=str(tmp_path / "d")
    )
    assert settings.agent.subagents.profiles[0].acp.env == {"AGENT_LOGIN": "abcdefgh-login"}
    assert settings.agent.subagents.profiles[0].acp.mounts == [str(agent_dir)]
    assert "abcdefgh-login" in known_secrets(settings, {}), "an acp.env value is a secret whatever its name"
    bad = {
        "must be an absolute path": {"mounts": ["opt/node"]},
        "does not exist": {"mounts": [str(tmp_path / "missing")]},
        "is the sandbox's own": {"mounts": ["/mnt/user-data/workspace"]},
        "environment variable names": {"env": {"BAD NAME": "x"}},
    }
    for problem, acp in bad.items():
        with pytest.raises(ConfigError, match=problem):
            load(acp)
    with pytest.raises(ConfigError, match="would show the service's data_dir"):
        load({"mounts": [str(tmp_path)]}, data_dir=str(tmp_path / "data"))
    with pytest.raises(ConfigError, match="would show the service's database"):
        load({"mounts": [str(agent_dir)]}, database={"url": f"sqlite+aiosqlite:///{agent_dir}/s.db"})
    with pytest.raises(ConfigError, match="would show the service's config file"):
        load({"mounts": [str(tmp_path)]}, data_dir="/var/lib/elsewhere")
