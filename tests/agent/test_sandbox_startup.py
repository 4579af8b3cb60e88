"""Issue 10: which sandbox runs is visible (/health, doctor), and a missing bubblewrap stops start-up clearly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bot.app import create_app
from tests.agent.helpers import agent_settings

pytestmark = pytest.mark.slow


def write_config(tmp_path: Path, sandbox: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"data_dir: {tmp_path / 'data'}\n"
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}'}}\n"
        "models: [{name: default, model: m, api_key: sk-startup-test, base_url: 'http://127.0.0.1:9/v1'}]\n"
        f"sandbox: {sandbox}\n"
    )
    return path


def without_bwrap() -> dict[str, str]:
    """The service's environment on a machine where bubblewrap is not installed."""
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    env["PATH"] = "/nonexistent"
    return env


def switchboard(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], capture_output=True, text=True, timeout=90, env=env
    )


def test_serve_without_bubblewrap_stops_with_one_line_saying_how_to_fix_it(tmp_path):
    result = switchboard(
        "serve", "--config", str(write_config(tmp_path, "{mode: bwrap}")), env=without_bwrap()
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "bubblewrap (bwrap) is not installed" in lines[0]
    assert "apt install bubblewrap" in lines[0]
    assert "host" not in lines[0]  # a sandbox that can be made to work is fixed, never switched off


def test_doctor_reports_the_sandbox_mode_and_whether_it_works(tmp_path):
    env = without_bwrap()
    missing = switchboard("doctor", "--config", str(write_config(tmp_path, "{mode: bwrap}")), env=env)
    assert "✗ sandbox: sandbox.mode is bwrap but bubblewrap (bwrap) is not installed" in missing.stdout
    working = switchboard(
        "doctor",
        "--config",
        str(write_config(tmp_path, "{mode: bwrap, network: false}")),
        env=dict(os.environ),
    )
    assert "✓ sandbox: bwrap — each command isolated, without network" in working.stdout
    # Which protections hold (issue 27): the filter, no user namespaces, the memory and disk limits.
    assert "seccomp filter on, new user namespaces blocked, memory limited per " in working.stdout
    assert "disk quota 2048 MB per conversation" in working.stdout
    host = switchboard("doctor", "--config", str(write_config(tmp_path, "{mode: host}")), env=env)
    assert "sandbox: host — commands run as this service's user, NOT isolated" in host.stdout


async def test_health_says_which_sandbox_runs(tmp_path, llm):
    for mode in ("bwrap", "host"):
        app = create_app(agent_settings(tmp_path / mode, llm, sandbox={"mode": mode}))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:
                body = (await client.get("/health")).json()
        assert body["sandbox"] == mode


def test_serve_where_user_namespaces_are_used_up_says_so_and_never_suggests_host_mode(tmp_path):
    # A user namespace whose limit allows exactly one more namespace — the one the service runs in, as an
    # ordinary user (uid 1000) — so bubblewrap's own fails as it does where they are switched off.
    config = write_config(tmp_path, "{mode: bwrap}")
    inner = ["unshare", "--user", "--map-user=1000", "--map-group=1000", sys.executable, "-m", "bot"]
    script = 'echo 1 > /proc/sys/user/max_user_namespaces && exec "$@"'
    result = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            script,
            "sh",
            *inner,
            "serve",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env=dict(os.environ),
    )
    assert result.returncode == 2, result.stderr
    # One line says what stops it (log lines before it, e.g. the per-process memory warning, may differ).
    [line] = [ln for ln in result.stderr.strip().splitlines() if ln.startswith("switchboard:")]
    assert line.startswith("switchboard: sandbox.mode is bwrap but bubblewrap cannot create a sandbox here (")
    assert "max_*_namespaces exceeded" in line  # bubblewrap's own words, passed on
    assert "bubblewrap needs unprivileged user namespaces" in line and "docs/sandbox.md" in line
    assert "host" not in line
