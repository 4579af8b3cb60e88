"""A channel enabled without its extra stops start-up with the one line that installs it.

The SDK's absence is simulated in a child process (``sys.modules[name] = None`` makes ``import name``
fail exactly as an uninstalled package does), so the shared environment keeps every package.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.foundation.test_cli import cli_env


def run_without(modules: list[str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import sys
        for name in {modules!r}:
            sys.modules[name] = None
        from bot.cli import main
        raise SystemExit(main({argv!r}))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=cli_env()
    )


@pytest.mark.parametrize(
    ("section", "module", "extra"),
    [
        ("telegram: {enabled: true, bot_token: '123:abc'}", "telegram", "telegram"),
        ("feishu: {enabled: true, app_id: cli_1, app_secret: s3cr3t-value}", "lark_oapi", "feishu"),
    ],
)
def test_an_enabled_channel_without_its_extra_names_the_extra(tmp_path: Path, section, module, extra):
    config = tmp_path / "config.yaml"
    config.write_text(f"data_dir: {tmp_path / 'data'}\nchannels:\n  {section}\n")
    result = run_without([module], ["serve", "--config", str(config)])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"switchboard: channels.{extra} is enabled but its SDK is not installed: "
        f"pip install 'switchboard-chatops[{extra}]' (missing Python module {module})"
    ]


def test_postgres_without_its_extra_names_it(tmp_path: Path):
    config = tmp_path / "config.yaml"
    config.write_text("database: {url: 'postgresql+asyncpg://sb:pw@127.0.0.1:1/sb'}\n")
    result = run_without(["asyncpg"], ["serve", "--config", str(config)])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "switchboard: database.url is PostgreSQL but pip install 'switchboard-chatops[postgres]' "
        "(missing Python module asyncpg)"
    )


#: The import names of every extra's own packages (not what core pulls in transitively anyway).
EXTRA_MODULES = [
    "telegram",
    "slack_bolt",
    "slack_sdk",
    "discord",
    "lark_oapi",
    "dingtalk_stream",
    "githubkit",
    "hishel",
    "asyncpg",
    "psycopg",
    "langgraph.checkpoint.postgres",
]


def test_serve_on_defaults_needs_no_extra(tmp_path: Path):
    import signal
    import time

    import httpx

    from tests.foundation.test_cli import free_port

    port = free_port()
    code = textwrap.dedent(
        f"""
        import sys
        for name in {EXTRA_MODULES!r}:
            sys.modules[name] = None
        from bot.cli import main
        raise SystemExit(main(["serve", "--port", "{port}", "--log-format", "text"]))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        status = None
        for _ in range(300):
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code
                if status == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        assert status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0].decode()
    assert "Traceback" not in output
    assert "config built-in defaults" in output  # the start-up summary, in text format
