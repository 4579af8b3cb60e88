"""A bad config stops start-up with one clear line per problem, naming the key — never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from config import ConfigError, Settings, load_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_the_built_in_defaults_are_the_embedded_single_instance_setup():
    settings = load_settings(env={"OPENAI_API_KEY": "sk-abc"})
    assert settings.database.url == "sqlite+aiosqlite:///./data/switchboard.db"
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8001)
    assert settings.models[0].api_key == "sk-abc"
    assert not any(section.enabled for _, section in settings.channels.items())


def test_dollar_names_are_read_from_the_environment(tmp_path):
    path = write(
        tmp_path,
        "channels:\n  telegram: {enabled: true, bot_token: $TG_TOKEN}\nserver: {public_url: '${URL}'}\n",
    )
    settings = load_settings(path, env={"TG_TOKEN": "123:abc", "URL": "https://bot.example"})
    assert settings.channels.telegram.bot_token == "123:abc"
    assert settings.server.public_url == "https://bot.example"


def test_every_problem_is_reported_on_its_own_line_naming_the_key(tmp_path):
    path = write(
        tmp_path,
        "sever: {port: 1}\nserver: {port: eighty}\nchannels:\n  slack: {enabled: true, bot_tokn: x}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert set(info.value.problems) == {
        "sever: unknown key",
        "server.port: Input should be a valid integer, unable to parse string as an integer",
        "channels.slack.bot_tokn: unknown key",
        # Reported with the rest, not after they are fixed: every problem at once.
        "channels.slack.bot_token: required because channels.slack.enabled is true, but environment "
        "variable SLACK_BOT_TOKEN is not set",
        "channels.slack.app_token: required because channels.slack.enabled is true, but environment "
        "variable SLACK_APP_TOKEN is not set",
    }


def test_a_lease_too_short_for_a_whole_second_of_long_polling_is_refused(tmp_path):
    path = write(tmp_path, "cluster: {lease_ttl_seconds: 1}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert info.value.problems == ["cluster.lease_ttl_seconds: Input should be greater than or equal to 1.5"]


def test_an_enabled_channel_without_its_secret_names_the_missing_variable(tmp_path):
    path = write(tmp_path, "channels:\n  telegram: {enabled: true, bot_token: $TELEGRAM_BOT_TOKEN}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert info.value.problems == [
        "channels.telegram.bot_token: required because channels.telegram.enabled is true, "
        "but environment variable TELEGRAM_BOT_TOKEN is not set"
    ]


def test_jwt_mode_refuses_a_default_secret(tmp_path):
    path = write(tmp_path, "auth: {mode: jwt, jwt_secret: changethis}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert info.value.problems == [
        "auth: auth.mode is jwt but auth.jwt_secret is empty or a well-known default"
    ]


def test_broken_yaml_points_at_the_line(tmp_path):
    path = write(tmp_path, "server:\n  port: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert info.value.problems[0].startswith(f"{path}: line ")


@pytest.mark.slow  # starts `python -m bot` in a subprocess
def test_serve_with_a_bad_config_exits_with_the_problems_and_no_traceback(tmp_path):
    path = write(tmp_path, "sever: 1\nbus: {queue_size: 0}\n")
    result = subprocess.run(
        [sys.executable, "-m", "bot", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "  - sever: unknown key" in result.stderr
    assert "  - bus.queue_size: Input should be greater than 0" in result.stderr


def _schema_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        keys.add(path)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _schema_keys(annotation, f"{path}.")
    return keys


def _yaml_keys(value: object, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(value, dict):
        for name, item in value.items():
            keys.add(f"{prefix}{name}")
            keys |= _yaml_keys(item, f"{prefix}{name}.")
    elif isinstance(value, list) and value and isinstance(value[0], dict) and prefix == "models.":
        keys |= _yaml_keys(value[0], prefix)
    return keys


def test_the_example_config_is_valid_and_documents_every_key():
    example = Path(__file__).resolve().parents[2] / "config.example.yaml"
    load_settings(example, env={})
    documented = _yaml_keys(yaml.safe_load(example.read_text()))
    missing = sorted(_schema_keys(Settings) - documented)
    assert missing == [], f"config.example.yaml does not document: {missing}"


# --- the environment, applied before validation ------------------------------------------------------


def test_references_inside_a_string_are_substituted_before_validation(tmp_path):
    path = write(
        tmp_path,
        "database: {url: 'postgresql+asyncpg://sb:$DB_PASSWORD@${DB_HOST}/sb'}\n"
        "server: {port: $PORT, public_url: 'https://${HOST:-bot.example}/x'}\n"
        "auth: {mode: jwt, jwt_secret: $SB_JWT}\n"
        "agent: {system_prompt: 'costs $$5'}\n",
    )
    env = {"DB_PASSWORD": "pw", "DB_HOST": "db.internal", "PORT": "9000", "SB_JWT": "x" * 40}
    settings = load_settings(path, env=env)
    assert settings.database.url == "postgresql+asyncpg://sb:pw@db.internal/sb"
    assert settings.server.port == 9000
    assert settings.server.public_url == "https://bot.example/x"
    assert settings.auth.jwt_secret == "x" * 40
    assert settings.agent.system_prompt == "costs $5"


def test_booleans_and_lists_coerce_from_variables(tmp_path):
    path = write(
        tmp_path,
        "channels:\n  telegram: {enabled: $TG_ON, bot_token: t0ken123, allowed_users: $TG_USERS}\n"
        "  discord: {allowed_guilds: $GUILDS}\n",
    )
    settings = load_settings(path, env={"TG_ON": "true", "TG_USERS": "alice, 42", "GUILDS": '["1", "2"]'})
    assert settings.channels.telegram.enabled is True
    assert settings.channels.telegram.allowed_users == ["alice", "42"]
    assert settings.channels.discord.allowed_guilds == ["1", "2"]


def test_a_default_applies_when_the_variable_is_unset_or_empty(tmp_path):
    path = write(tmp_path, "server: {port: '${PORT:-8123}'}\nmemory: {enabled: '${MEM:-false}'}\n")
    assert load_settings(path, env={}).server.port == 8123
    assert load_settings(path, env={"PORT": ""}).server.port == 8123
    assert load_settings(path, env={"PORT": "1"}).server.port == 1
    assert load_settings(path, env={}).memory.enabled is False


def test_switchboard_variables_override_nested_keys_with_types(tmp_path):
    path = write(tmp_path, "server: {port: 1}\nchannels:\n  telegram: {bot_token: abcdef}\n")
    env = {
        "SWITCHBOARD_SERVER__PORT": "9100",
        "SWITCHBOARD_DATA_DIR": "/srv/sb",
        "SWITCHBOARD_CHANNELS__TELEGRAM__ENABLED": "true",
        "SWITCHBOARD_CHANNELS__TELEGRAM__ALLOWED_USERS": "[alice, bob]",
        "SWITCHBOARD_MODELS__0__BASE_URL": "http://127.0.0.1:11434/v1",
        # Not keys: the config path, and a variable the test suite uses.
        "SWITCHBOARD_CONFIG": "/nowhere.yaml",
        "SWITCHBOARD_TEST_PG_URL": "postgresql://x",
    }
    settings = load_settings(path, env=env)
    assert settings.server.port == 9100
    assert settings.data_dir == "/srv/sb"
    assert settings.channels.telegram.enabled is True
    assert settings.channels.telegram.allowed_users == ["alice", "bob"]
    assert settings.models[0].base_url == "http://127.0.0.1:11434/v1"
    assert settings.models[0].name == "default"


def test_an_override_value_is_taken_literally(tmp_path):
    settings = load_settings(
        write(tmp_path, "{}\n"), env={"SWITCHBOARD_AUTH__JWT_SECRET": "pa$$w0rd-$HOME-long"}
    )
    assert settings.auth.jwt_secret == "pa$$w0rd-$HOME-long"


def test_any_key_can_be_read_from_a_file(tmp_path):
    token = tmp_path / "tg_token"
    token.write_text("123:from-a-file\n")
    jwt = tmp_path / "jwt"
    jwt.write_text("j" * 32)
    path = write(
        tmp_path,
        f"channels:\n  telegram: {{enabled: true, bot_token_file: {token}}}\nauth: {{mode: jwt}}\n",
    )
    settings = load_settings(path, env={"SWITCHBOARD_AUTH__JWT_SECRET_FILE": str(jwt)})
    assert settings.channels.telegram.bot_token == "123:from-a-file"
    assert settings.auth.jwt_secret == "j" * 32


def test_secrets_default_to_their_variables_like_the_example_says(tmp_path):
    path = write(tmp_path, "channels:\n  telegram: {enabled: true}\n  slack: {enabled: true}\n")
    settings = load_settings(
        path, env={"TELEGRAM_BOT_TOKEN": "123:abc", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}
    )
    assert settings.channels.telegram.bot_token == "123:abc"
    assert settings.channels.slack.app_token == "xapp-1"


def test_the_example_defaults_equal_the_built_in_defaults(tmp_path):
    example = Path(__file__).resolve().parents[2] / "config.example.yaml"
    env = {
        "OPENAI_API_KEY": "sk-1",
        "SWITCHBOARD_JWT_SECRET": "j" * 20,
        "TELEGRAM_BOT_TOKEN": "123:abc",
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_APP_TOKEN": "xapp-1",
        "DISCORD_BOT_TOKEN": "d" * 10,
        "FEISHU_APP_ID": "cli_1",
        "FEISHU_APP_SECRET": "f" * 10,
        "DINGTALK_CLIENT_ID": "ding1",
        "DINGTALK_CLIENT_SECRET": "s" * 10,
        "GITHUB_WEBHOOK_SECRET": "w" * 10,
        "GITHUB_APP_ID": "1",
        "GITHUB_APP_PRIVATE_KEY_PATH": "/etc/app.pem",
    }
    for variables in ({}, env):
        assert load_settings(example, env=variables) == load_settings(write(tmp_path, "{}\n"), env=variables)


def test_github_app_key_as_text(tmp_path):
    pem = "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----"
    path = write(
        tmp_path, "channels:\n  github: {app_id: '1', private_key: $KEY, allow_unsigned_webhooks: true}\n"
    )
    assert load_settings(path, env={"KEY": pem}).channels.github.private_key == pem


@pytest.mark.parametrize(
    ("text", "env", "problem"),
    [
        (
            "server: {port: $PORT}\n",
            {},
            "server.port: environment variable PORT is not set (Input should be a valid integer)",
        ),
        (
            "server: {port: $PORT}\n",
            {"PORT": "eighty"},
            "server.port: Input should be a valid integer, unable to parse string as an integer (from $PORT)",
        ),
        (
            "database: {url: 'postgresql+asyncpg://sb:$DB_PASSWORD@db/sb'}\n",
            {},
            "database.url: environment variable DB_PASSWORD is not set (write ${DB_PASSWORD:-} for empty)",
        ),
        (
            "agent: {system_prompt: 'a ${B'}\n",
            {},
            "agent.system_prompt: unterminated ${ (write $$ for a literal $)",
        ),
        (
            "{}\n",
            {"SWITCHBOARD_SERVER__PORTT": "1"},
            "server.portt: unknown key (from SWITCHBOARD_SERVER__PORTT)",
        ),
        (
            "{}\n",
            {"SWITCHBOARD_BUS__QUEUE_SIZE": "0"},
            "bus.queue_size: Input should be greater than 0 (from SWITCHBOARD_BUS__QUEUE_SIZE)",
        ),
        (
            "{}\n",
            {"SWITCHBOARD_MODELS__5__MODEL": "x"},
            "models.5.model: models has no entry 5 (from SWITCHBOARD_MODELS__5__MODEL)",
        ),
        (
            "{}\n",
            {"SWITCHBOARD_CHANNELS__TELEGRAM__ALLOWED_USERS": "[a, "},
            "channels.telegram.allowed_users: SWITCHBOARD_CHANNELS__TELEGRAM__ALLOWED_USERS starts like a list "
            "or mapping but is not valid YAML/JSON",
        ),
        (
            "channels:\n  telegram: {bot_token: abcdef, bot_token_file: /nonexistent/tg}\n",
            {},
            "channels.telegram.bot_token: set either bot_token or bot_token_file, not both",
        ),
        (
            "channels:\n  telegram: {bot_token_file: /nonexistent/tg}\n",
            {},
            "channels.telegram.bot_token_file: cannot read /nonexistent/tg (No such file or directory)",
        ),
        (
            "auth: {mode: jwt, jwt_secret: '${SHORT:-abc}'}\n",
            {},
            "auth: auth.jwt_secret must be at least 16 characters",
        ),
        (
            "channels:\n  github: {app_id: '1', private_key: not-a-key}\n",
            {},
            "channels.github: private_key does not look like a PEM private key (-----BEGIN … PRIVATE KEY-----)",
        ),
    ],
)
def test_each_environment_problem_is_one_line_naming_key_and_variable(tmp_path, text, env, problem):
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text), env=env)
    assert info.value.problems == [problem]


def test_a_fact_cap_beyond_what_a_turn_can_rank_quickly_is_refused(tmp_path):
    path = write(tmp_path, "memory: {max_facts: 100000}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert info.value.problems == ["memory.max_facts: Input should be less than or equal to 10000"]
