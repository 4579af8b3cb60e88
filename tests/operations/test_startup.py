"""``switchboard serve`` answers HTTP while the agent is still being built, and loses nothing meanwhile.

The agent's start is held open at the network edge, not in our code: its one MCP server is a real stdio
server (tests/fakes/mcp_server.py) behind a named pipe that it reads before it starts, so until the test
writes to the pipe the agent cannot finish connecting its tools. That makes "still starting" a state the
test controls rather than a race it hopes to win.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fakes.github import FakeGitHub
from tests.fakes.openai_server import FakeOpenAI
from tests.foundation.test_cli import cli_env, free_port
from tests.github.conftest import APP_ID, BOT, REPO, SECRET, _key_pair, agent, comment_payload
from webhooks.signature import sign

pytestmark = pytest.mark.slow

MCP_SERVER = Path(__file__).resolve().parent.parent / "fakes" / "mcp_server.py"
# Reads the pipe (blocks until the test writes and closes it), then becomes the real MCP server.
GATED_MCP = (
    "import os, sys\nopen(sys.argv[1]).read()\nos.execv(sys.executable, [sys.executable, sys.argv[2]])\n"
)


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub(app_id=APP_ID, public_key_pem=_key_pair()[1], bot_login=f"{BOT}[bot]") as server:
        yield server  # type: ignore[misc]


def write_config(tmp_path: Path, port: int, llm: FakeOpenAI, github: FakeGitHub, gate: Path) -> Path:
    key_path = tmp_path / "app-private-key.pem"
    key_path.write_bytes(_key_pair()[0])
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port},
        "data_dir": str(tmp_path / "data"),
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}"},
        "sandbox": {"mode": "host"},
        "memory": {"enabled": False},
        "models": [{"name": "default", "model": "fake-model", "api_key": "sk-x", "base_url": llm.base_url}],
        "mcp_servers": [
            {
                "name": "gated",
                "command": sys.executable,
                "args": ["-c", GATED_MCP, str(gate), str(MCP_SERVER)],
                "isolate": False,
                "start_timeout_seconds": 600,  # the test opens the gate; this only bounds a broken run
            }
        ],
        "channels": {
            "github": {
                "enabled": True,
                "webhook_secret": SECRET,
                "app_id": APP_ID,
                "private_key_path": str(key_path),
                "api_base_url": github.url,
                "edit_interval_seconds": 0.05,
                "agents": [agent()],
            }
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@asynccontextmanager
async def serving(
    config: Path, port: int
) -> AsyncIterator[tuple[httpx.AsyncClient, subprocess.Popen[bytes]]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "--log-format", "text", "serve", "--config", str(config)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0].decode()
        print(output)  # shown when the test fails


async def first_health(client: httpx.AsyncClient, proc: subprocess.Popen[bytes]) -> httpx.Response:
    for _ in range(1200):
        assert proc.poll() is None, "serve exited during start-up"
        try:
            return await client.get("/health")
        except httpx.TransportError:
            await asyncio.sleep(0.05)
    raise AssertionError("serve never answered /health")


async def health_once_open(client: httpx.AsyncClient, proc: subprocess.Popen[bytes]) -> httpx.Response:
    """The first /health after the service opened (before that it honestly says "starting")."""
    for _ in range(1200):
        health = await first_health(client, proc)
        if health.json()["status"] != "starting":
            return health
        await asyncio.sleep(0.05)
    raise AssertionError("serve never finished opening the service")


async def health_until(client: httpx.AsyncClient, agent_state: str) -> dict[str, Any]:
    for _ in range(1200):
        body: dict[str, Any] = (await client.get("/health")).json()
        if body["agent"] == agent_state:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"the agent never became {agent_state}")


async def open_gate(gate: Path) -> None:
    def write() -> None:
        with gate.open("w") as pipe:  # returns once the gated MCP server has opened its end
            pipe.write("go")

    await asyncio.wait_for(asyncio.to_thread(write), 120)


async def test_a_comment_sent_while_the_agent_starts_is_stored_and_answered_once_it_is_ready(
    tmp_path: Path, llm: FakeOpenAI, github: FakeGitHub
) -> None:
    gate = tmp_path / "mcp-gate"
    os.mkfifo(gate)
    port = free_port()
    config = write_config(tmp_path, port, llm, github, gate)
    async with serving(config, port) as (client, proc):
        health = await health_once_open(client, proc)
        # HTTP, the database and the GitHub webhook route are up; the agent is honestly not.
        assert health.status_code == 200
        body = health.json()
        assert body["agent"] == "starting" and body["database"] == "ok"
        assert body["channels"]["github"]["state"] == "connected"
        not_ready = await client.get("/ready")  # a load balancer keeps sending to the old instance
        assert not_ready.status_code == 503
        assert not_ready.json()["reason"] == "starting: the agent is not ready yet"

        data = json.dumps(comment_payload(f"@{BOT} what does the failing test say?")).encode()
        delivery = await client.post(
            "/api/webhooks/github",
            content=data,
            headers={
                "X-GitHub-Event": "issue_comment",
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": sign(SECRET, data),
                "Content-Type": "application/json",
            },
        )
        # Accepted and stored (GitHub gets its 2xx), not refused because the agent is not ready.
        assert delivery.status_code == 200, delivery.text
        assert delivery.json()["dispatch"]["fired"] == ["reviewer"]
        waiting = (await client.get("/health")).json()
        assert waiting["agent"] == "starting" and waiting["inbox"]["unfinished"] == 1
        assert llm.completions == []  # nothing has reached the model yet

        await open_gate(gate)
        ready = await health_until(client, "ready")
        assert (await client.get("/ready")).json() == {"ready": True}
        assert ready["mcp"] == {"gated": "ok (3 tools)"}
        comments = await github.wait_for(
            lambda: [
                c for c in github.comments_on(REPO, 1) if "echo:" in c.body and "failing test" in c.body
            ],
            timeout=60,
        )
        assert comments and len(llm.completions) == 1


async def test_an_agent_that_cannot_be_built_still_ends_serve_with_the_reason(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    (data / "sb-checkpoints.db").mkdir()  # where SQLite checkpoints go: a directory cannot be opened
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"host": "127.0.0.1", "port": port},
                "data_dir": str(data),
                "database": {"url": f"sqlite+aiosqlite:///{data / 'sb.db'}"},
                "sandbox": {"mode": "host"},
                "models": [
                    {"name": "default", "model": "m", "api_key": "k", "base_url": "http://127.0.0.1:9/v1"}
                ],
            }
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "bot", "--log-format", "text", "serve", "--config", str(config)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "the agent could not be started: OperationalError: unable to open database file" in result.stderr


def test_a_broken_model_config_stops_serve_before_anything_starts(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "data"),
                "models": [{"name": "default", "model": "a"}, {"name": "default", "model": "b"}],
            }
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "bot", "serve", "--config", str(config)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "configuration problem" in result.stderr
    assert "model names must be unique; repeated: default" in result.stderr


async def test_health_answers_while_the_database_is_still_opening_and_a_database_that_fails_ends_serve(
    tmp_path: Path,
) -> None:
    # A PostgreSQL host that accepts the connection and never answers (a hung network or server):
    # opening the service waits on it, which makes "still opening" a state the test controls.
    hung = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(hung.accept()[0]), daemon=True).start()
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"host": "127.0.0.1", "port": port},
                "data_dir": str(tmp_path / "data"),
                "database": {"url": f"postgresql+asyncpg://sb:pw@127.0.0.1:{hung.getsockname()[1]}/sb"},
                "sandbox": {"mode": "host"},
                "models": [
                    {"name": "default", "model": "m", "api_key": "k", "base_url": "http://127.0.0.1:9/v1"}
                ],
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "--log-format", "text", "serve", "--config", str(config)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            health = await first_health(client, proc)  # type: ignore[arg-type]
            # Alive, and saying nothing it does not know yet.
            assert health.status_code == 200
            assert health.json()["status"] == "starting" and health.json()["database"] == "starting"
            not_ready = await client.get("/ready")
            assert not_ready.status_code == 503
            assert not_ready.json()["reason"] == "starting: the database is not open yet"
            for _ in range(600):  # the service is really waiting on the database
                if accepted:
                    break
                await asyncio.sleep(0.05)
            assert accepted, "serve never connected to the database"
            early = asyncio.create_task(client.get("/metrics"))  # any other route waits for start-up
            await asyncio.sleep(0.5)
            assert not early.done()

            hung.close()  # the database goes away: start-up fails
            accepted[0].close()
            assert (await early).status_code == 503
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, stdout + stderr
    failure = [line for line in stderr.splitlines() if line.startswith("switchboard: ")]
    assert len(failure) == 1 and failure[0].startswith("switchboard: start-up failed: "), stderr
    assert "Traceback" not in stderr
