"""Issue 27: the service starts, and isolates, as an ordinary user — as the shipped systemd unit runs it.

These tests start ``python -m bot`` with ``setpriv`` as an unprivileged account (``SWITCHBOARD_TEST_USER``,
default ``switchboard-test``), so they need root; ``.ci/unprivileged-user`` creates the account and
lets it run this interpreter and read this checkout (CI runs it before the tests).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from tests.agent.helpers import all_tool_results
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.foundation.test_cli import free_port

pytestmark = pytest.mark.slow

USER = os.environ.get("SWITCHBOARD_TEST_USER", "switchboard-test")


def as_user(account: pwd.struct_passwd, argv: list[str]) -> list[str]:
    pythonpath = os.environ.get("PYTHONPATH")  # a checkout run with PYTHONPATH=$PWD tests that code
    return [
        "setpriv",
        f"--reuid={account.pw_uid}",
        f"--regid={account.pw_gid}",
        "--init-groups",
        "--reset-env",  # HOME, USER, SHELL and PATH of that account, as systemd gives a service
        "--",
        "env",
        *([f"PYTHONPATH={pythonpath}"] if pythonpath else []),
        "FAKE_KEY=sk-fake-nonroot",
        *argv,
    ]


@pytest.fixture(scope="module")
def account() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("starts the service as another, ordinary user with setpriv, which needs root")
    try:
        found = pwd.getpwnam(USER)
    except KeyError:
        pytest.fail(f"user {USER} does not exist: run .ci/unprivileged-user (as root) first")
    probe = subprocess.run(
        as_user(found, [sys.executable, "-c", "import bot.cli"]),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.fail(
            f"{USER} cannot run {sys.executable} with this checkout ({probe.stderr.strip()[-300:]}): "
            "run .ci/unprivileged-user (as root) first"
        )
    return found


@pytest.fixture
def home(account: pwd.struct_passwd) -> Iterator[Path]:
    """A folder of the ordinary user's own (pytest's tmp_path is root's, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="switchboard-nonroot-"))
    os.chown(folder, account.pw_uid, account.pw_gid)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_config(folder: Path, llm: FakeOpenAI, port: int = 8001) -> Path:
    config = folder / "config.yaml"
    config.write_text(
        f"server: {{port: {port}}}\n"
        f"data_dir: {folder / 'data'}\n"
        f"database: {{url: 'sqlite+aiosqlite:///{folder / 'data' / 'sb.db'}'}}\n"
        f"models: [{{name: default, model: m, api_key: $FAKE_KEY, base_url: '{llm.base_url}', max_retries: 0}}]\n"
        "memory: {enabled: false}\n"
    )
    return config


def chat(
    account: pwd.struct_passwd, folder: Path, config: Path, text: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "bot", "chat", "--config", str(config)]
    return subprocess.run(
        as_user(account, command), input=text, cwd=folder, capture_output=True, text=True, timeout=120
    )


def test_a_bash_command_of_a_service_run_by_an_ordinary_user_runs_in_the_sandbox(
    account: pwd.struct_passwd, home: Path, llm: FakeOpenAI
) -> None:
    config = write_config(home, llm)
    probe = (
        "id -u; id -un; grep CapEff /proc/self/status; "
        f"test -e {config} && echo config-visible || echo config-absent; "
        f"test -e {home / 'data'} && echo data-visible || echo data-absent; "
        "echo made > made-in-sandbox"
    )
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": probe})]), Reply(text="Done."))
    result = chat(account, home, config, "who runs this?\n")
    assert result.returncode == 0, result.stderr
    assert "Done." in result.stdout
    [tool] = all_tool_results(llm)
    lines = tool.splitlines()
    assert lines[0] == "[exit code 0]", tool
    assert lines[1:3] == ["1000", "sandbox"]
    assert lines[3].split() == ["CapEff:", "0000000000000000"]  # no capabilities at all
    assert lines[4:6] == ["config-absent", "data-absent"]  # they exist on the host, not in the sandbox
    [made] = (home / "data" / "users").rglob("made-in-sandbox")
    assert made.read_text() == "made\n"
    assert made.stat().st_uid == account.pw_uid  # the sandbox's uid 1000 is the service's own, mapped
    assert (home / "data").stat().st_uid == account.pw_uid


def test_serve_run_by_an_ordinary_user_gets_ready(
    account: pwd.struct_passwd, home: Path, llm: FakeOpenAI
) -> None:
    port = free_port()
    config = write_config(home, llm, port)
    command = [sys.executable, "-m", "bot", "--log-format", "text", "serve", "--config", str(config)]
    proc = subprocess.Popen(
        as_user(account, command), cwd=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        ready = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5)
            except httpx.TransportError:
                ready = None
            if ready is not None and ready.status_code == 200:
                break
            time.sleep(0.1)
        assert ready is not None and ready.status_code == 200, ready and ready.text
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
        assert health["sandbox"] == "bwrap" and health["agent"] == "ready"
    finally:
        proc.terminate()
        output = proc.communicate(timeout=60)[0].decode()
        print(output)
    assert proc.returncode in (0, -signal.SIGTERM), output  # uvicorn re-raises the signal it stopped on


def test_a_data_dir_left_by_root_is_refused_in_one_line(
    account: pwd.struct_passwd, home: Path, llm: FakeOpenAI
) -> None:
    config = write_config(home, llm)
    data = home / "data"
    data.mkdir()  # root's, 0755: as after running the service as root once
    (data / "sb.db").write_bytes(b"")
    result = chat(account, home, config, "hello\n")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line == (
        f"switchboard: data_dir {data} is not writable by this service's user ({USER}, uid {account.pw_uid}): "
        f"{data} belongs to root (was the service run as root before?): chown -R {USER}: {data}"
    )
    assert llm.completions == []


def test_under_the_units_umask_a_root_services_sandbox_user_still_has_a_name(
    account: pwd.struct_passwd, home: Path, llm: FakeOpenAI
) -> None:
    # deploy/switchboard.service sets UMask=0027; a service run as root with it once wrote the sandbox's
    # /etc/passwd 0640, which the thread's own uid then could not read ("I have no name!").
    config = write_config(home, llm)
    llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "id -un; id -u"})]), Reply(text="Done."))
    command = ["sh", "-c", 'umask 0027 && exec "$@"', "sh", sys.executable, "-m", "bot", "chat"]
    result = subprocess.run(
        [*command, "--config", str(config)],
        input="who?\n",
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FAKE_KEY": "sk-fake-nonroot"},
    )
    assert result.returncode == 0, result.stderr
    [tool] = all_tool_results(llm)
    name, uid = tool.splitlines()[1:3]
    assert name == "sandbox" and int(uid) >= 1_800_000_000  # the thread's own uid, not root's


def test_a_subagent_of_a_service_run_by_an_ordinary_user_works_in_the_threads_sandbox_and_is_priced(
    account: pwd.struct_passwd, home: Path, llm: FakeOpenAI
) -> None:
    """Subagents (issue 36) and prices (issue 34) as the shipped unit runs them: the ``task`` tool's
    subagent runs ``bash`` in the thread's sandbox as the ordinary user, and ``switchboard usage``
    (run by that user) prices the turn's model calls from the same database."""
    config = write_config(home, llm)
    with config.open("a") as extra:
        extra.write("agent: {system_prompt: PARENT-NONROOT-5521, subagents: {enabled: true}}\n")
    text = config.read_text().replace(
        "max_retries: 0}]",
        "max_retries: 0, pricing: {input: '2.50', output: '10.00', currency: USD}}]",
    )
    config.write_text(text)
    job = "SUBJOB-77: write a file and say who you are"
    llm.script_for(
        "PARENT-NONROOT-5521",
        Reply(tool_calls=[ToolCall("task", {"title": "who am I", "prompt": job, "kind": "general"})]),
        Reply(text="The subagent is done."),
    )
    llm.script_for(
        "SUBJOB-77",
        Reply(tool_calls=[ToolCall("bash", {"command": "id -u; echo sub > made-by-subagent"})]),
        Reply(text="SUBRESULT: I am uid 1000 and wrote the file."),
    )
    result = chat(account, home, config, "delegate it\n")
    assert result.returncode == 0, result.stderr
    assert "The subagent is done." in result.stdout
    [bash_result] = [r for r in all_tool_results(llm) if r.startswith("[exit code")]
    assert bash_result.splitlines()[:2] == ["[exit code 0]", "1000"], bash_result
    [made] = (home / "data" / "users").rglob("made-by-subagent")
    assert made.stat().st_uid == account.pw_uid
    assert any("SUBRESULT" in r for r in all_tool_results(llm)), "the parent got the subagent's result"

    usage = subprocess.run(
        as_user(
            account,
            [sys.executable, "-m", "bot", "usage", "--by", "model", "--json", "--config", str(config)],
        ),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert usage.returncode == 0, usage.stderr
    [row] = json.loads(usage.stdout)["rows"]
    assert row["model"] == "default" and row["turns"] >= 1, row
    assert Decimal(row["cost"]) > 0 and row["currency"] == "USD", row
