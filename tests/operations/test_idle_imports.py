"""What a ready ``serve`` has imported: what the enabled features need, not what disabled ones would.

Each test runs ``switchboard serve`` in a real child process. A thread in that process waits for
``/ready`` to answer 200, writes the names in ``sys.modules`` to a file and stops the service with
SIGTERM, so the list is the idle service's own: every module the start-up imported, in any thread.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.foundation.test_cli import cli_env, free_port

pytestmark = pytest.mark.slow

#: Runs in the child: the service in the main thread, the watcher in a daemon thread.
CHILD = """
import json, os, signal, sys, threading, time, urllib.error, urllib.request

def watch():
    while True:
        try:
            with urllib.request.urlopen("http://127.0.0.1:{port}/ready", timeout=2) as answer:
                if answer.status == 200:
                    break
        except (OSError, urllib.error.HTTPError):
            pass
        time.sleep(0.05)
    with open({out!r}, "w") as file:
        json.dump(sorted(sys.modules), file)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=watch, daemon=True).start()
from bot.cli import main
raise SystemExit(main(["serve", "--config", {config!r}]))
"""


def modules_when_ready(tmp_path: Path, extra: dict[str, object]) -> set[str]:
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "data_dir": str(tmp_path / "data"),
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'data' / 'sb.db'}"},
        "sandbox": {"mode": "host"},
        # Never called: start-up does not talk to the model.
        "models": [{"name": "default", "model": "m", "api_key": "sk-x", "base_url": "http://127.0.0.1:9/v1"}],
        **extra,
    }
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "modules.json"
    code = textwrap.dedent(CHILD).format(port=port, out=str(out), config=str(config_path))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300
    )
    assert out.exists(), f"serve never became ready:\n{proc.stderr[-3000:]}"
    return set(json.loads(out.read_text()))


def test_idle_service_has_the_agent_but_not_disabled_channels_or_token_checks(tmp_path: Path):
    modules = modules_when_ready(
        tmp_path, {"channels": {"telegram": {"enabled": False, "bot_token": "123:abc"}}}
    )
    # Ready means a turn can run: the model's class is loaded, the first message does not import it.
    assert "agent.chat_completions" in modules
    # The default model class talks HTTP itself: the openai SDK (~20 MiB, 600 modules) stays out.
    assert "openai" not in modules
    assert "langchain_openai" not in modules
    assert "langgraph.graph" in modules
    # A disabled channel's SDK is not imported, nor one of a platform that is not configured at all,
    # nor the clients of subsystems not configured (MCP servers, the browser): each is megabytes.
    for package in ("telegram", "slack_sdk", "slack_bolt", "discord", "lark_oapi", "dingtalk_stream"):
        assert package not in modules, package
    assert "mcp" not in modules
    assert "playwright" not in modules
    # auth.mode none checks no tokens: PyJWT and the cryptography it brings (~8 MiB) stay out.
    assert "jwt" not in modules
    assert "cryptography" not in modules


def test_jwt_mode_imports_pyjwt_before_it_is_ready(tmp_path: Path):
    modules = modules_when_ready(
        tmp_path, {"auth": {"mode": "jwt", "jwt_secret": "s" * 8 + "-not-default-42"}}
    )
    assert "jwt" in modules  # every request checks a token: imported at start-up, not by the first one
