"""``switchboard config check | show | schema`` and the config mistakes they (and ``serve``) answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from bot.cli import apply_listen_flags
from config import ConfigError, load_settings
from tests.foundation.test_cli import cli_env

ROOT = Path(__file__).resolve().parents[2]


def switchboard(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(**env),
    )


THREE_MISTAKES = """\
database:
  url: postgresql://sb:hunter22@db.internal/sb
models:
  - name: default
    api_key: sk-abcdef123
    temprature: 0.2
channels:
  slack:
    bot_tokn: xoxb-1
"""


def test_config_check_reports_all_three_mistakes_at_once_one_line_each(tmp_path):
    (tmp_path / "config.yaml").write_text(THREE_MISTAKES)
    result = switchboard("config", "check", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        "database.url: postgresql:// is not the asyncpg driver the service uses; "
        "write postgresql+asyncpg://sb:***@db.internal/sb",
        "channels.slack.bot_tokn: unknown key",
        "models.0.temprature: not a setting of agent.chat_completions:ChatCompletions (did you mean temperature?)",
    ]
    assert "config.yaml: 3 problems" in result.stderr
    assert "hunter22" not in result.stdout + result.stderr


def test_config_check_passes_the_shipped_example(tmp_path):
    result = switchboard("config", "check", "--config", str(ROOT / "config.example.yaml"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("config.example.yaml: no problems found")


@pytest.mark.parametrize(
    ("url", "answer"),
    [
        ("postgresql://u@h/db", "write postgresql+asyncpg://u@h/db"),
        ("postgres://u@h/db", "write postgresql+asyncpg://u@h/db"),
        ("postgresql+psycopg2://u@h/db", "write postgresql+asyncpg://u@h/db"),
        ("sqlite:///./data/sb.db", "write sqlite+aiosqlite:///./data/sb.db"),
        ("sqlite:////var/lib/sb.db", "write sqlite+aiosqlite:////var/lib/sb.db"),
        ("sqlite+aiosqlite://data/sb.db", "write sqlite+aiosqlite:///data/sb.db (three slashes"),
        ("mysql://u@h/db", "mysql:// is not a database the service supports; write sqlite+aiosqlite:///"),
        ("./data/sb.db", "is not a database URL; write sqlite+aiosqlite:///"),
    ],
)
def test_each_database_url_mistake_is_one_line_with_the_right_form(tmp_path, url, answer):
    with pytest.raises(ConfigError) as caught:
        load_settings(None, env={}, overrides={"database": {"url": url}})
    (line,) = caught.value.problems
    assert line.startswith("database.url: ")
    assert answer in line


def test_serve_and_doctor_answer_a_psql_style_url_with_the_asyncpg_form(tmp_path):
    (tmp_path / "config.yaml").write_text("database: {url: 'postgresql://sb:pw@127.0.0.1/sb'}\n")
    expected = (
        "database.url: postgresql:// is not the asyncpg driver the service uses; write postgresql+asyncpg://"
    )
    serve = switchboard("serve", "--port", "0", cwd=tmp_path)
    assert serve.returncode == 2
    assert expected in serve.stderr
    doctor = switchboard("doctor", cwd=tmp_path)
    assert doctor.returncode == 1
    assert expected in doctor.stdout


def test_numeric_ids_are_accepted_where_platforms_use_numbers(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "channels:\n  telegram:\n    admins: [4242]\n    allowed_users: [1, '2']\n    trust: {members: [77]}\n"
    )
    settings = load_settings(tmp_path / "config.yaml", env={})
    assert settings.channels.telegram.admins == ["4242"]
    assert settings.channels.telegram.trust.members == ["77"]
    with pytest.raises(ConfigError) as caught:  # a boolean is still not an id
        load_settings(None, env={}, overrides={"channels": {"telegram": {"admins": [True]}}})
    assert caught.value.problems[0].startswith("channels.telegram.admins.0:")


def test_public_url_follows_server_host_and_port_unless_set(tmp_path):
    assert load_settings(None, env={}, overrides={"server": {"port": 9100}}).server.public_url == (
        "http://localhost:9100"
    )
    assert load_settings(None, env={}, overrides={"server": {"host": "10.1.2.3"}}).server.public_url == (
        "http://10.1.2.3:8001"
    )
    explicit = load_settings(None, env={}, overrides={"server": {"public_url": "https://bot.example.com"}})
    assert explicit.server.public_url == "https://bot.example.com"
    # `serve --port` moves a derived link along, and leaves an explicit one alone.
    derived = load_settings(None, env={})
    apply_listen_flags(derived, None, 9200)
    assert derived.server.public_url == "http://localhost:9200"
    apply_listen_flags(explicit, None, 9200)
    assert explicit.server.public_url == "https://bot.example.com"


def test_config_show_prints_the_effective_config_with_secrets_masked(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "database: {url: 'postgresql+asyncpg://sb:pw12@db/sb'}\n"
        "models: [{name: default, api_key: $MODEL_KEY}]\n"
        "mcp_servers: [{name: tools, url: 'http://127.0.0.1:9/mcp', headers: {X-Api: $MODEL_KEY}}]\n"
    )
    # CI's own database URL (password "postgres") is a secret of the environment too, and would mask
    # "postgres" inside the URL shown here: this run has only the secrets it sets.
    result = switchboard(
        "config",
        "show",
        cwd=tmp_path,
        MODEL_KEY="sk-live-secret",
        SWITCHBOARD_SERVER__PORT="9300",
        SWITCHBOARD_TEST_PG_URL="",
    )
    assert result.returncode == 0, result.stderr
    shown = yaml.safe_load(result.stdout)
    assert shown["server"]["port"] == 9300  # the environment's override is what runs
    assert shown["server"]["public_url"] == "http://localhost:9300"
    assert shown["database"]["url"] == "postgresql+asyncpg://sb:***@db/sb"
    assert shown["models"][0]["api_key"] == "***"
    assert shown["mcp_servers"][0]["headers"]["X-Api"] == "***"
    assert "sk-live-secret" not in result.stdout and "pw12" not in result.stdout


def test_config_schema_is_a_json_schema_the_example_satisfies_and_a_typo_breaks(tmp_path):
    result = switchboard("config", "schema", cwd=tmp_path)
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    example = yaml.safe_load((ROOT / "config.example.yaml").read_text())
    jsonschema.validate(example, schema)
    example["server"]["prot"] = 1
    with pytest.raises(jsonschema.ValidationError, match="prot"):
        jsonschema.validate(example, schema)
