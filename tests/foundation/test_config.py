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
    }


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
