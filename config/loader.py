"""Load settings: find the file, read YAML, substitute ``$NAME`` from the environment, validate.

Every problem becomes one :class:`ConfigError` line that names the key, so ``switchboard serve`` can print
what to fix instead of a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from config.schema import Settings

ENV_REF = re.compile(r"^\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))$")
CONFIG_ENV_VAR = "SWITCHBOARD_CONFIG"
DEFAULT_CONFIG_FILE = "config.yaml"


class ConfigError(Exception):
    """Configuration is unusable; ``problems`` holds one human-readable line per problem."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        super().__init__("\n".join(problems))


def find_config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """Apply the documented search order: ``--config``, ``$SWITCHBOARD_CONFIG``, ``./config.yaml``."""
    if explicit:
        return Path(explicit)
    from_env = os.environ.get(CONFIG_ENV_VAR)
    if from_env:
        return Path(from_env)
    local = Path(DEFAULT_CONFIG_FILE)
    return local if local.is_file() else None


def substitute_env(value: Any, env: Mapping[str, str], path: str = "", unset: list[str] | None = None) -> Any:
    """Replace every string that is exactly ``$NAME`` or ``${NAME}`` by the variable's value.

    An unset variable becomes ``None`` and its key is appended to ``unset`` so a later check can say
    "TELEGRAM_BOT_TOKEN is not set" rather than "field required".
    """
    if isinstance(value, str):
        match = ENV_REF.match(value.strip())
        if not match:
            return value
        name = match.group("braced") or match.group("bare")
        if name in env and env[name] != "":
            return env[name]
        if unset is not None:
            unset.append(f"{path} (${name})")
        return None
    if isinstance(value, dict):
        return {k: substitute_env(v, env, f"{path}.{k}" if path else str(k), unset) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, f"{path}[{i}]", unset) for i, v in enumerate(value)]
    return value


def _format_validation_error(error: ValidationError) -> list[str]:
    lines = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"] if not str(p).startswith("function-after"))
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        lines.append(f"{loc or '(top level)'}: {message}")
    return lines


def _missing_secrets(settings: Settings, unset: list[str]) -> list[str]:
    unset_by_key = {entry.split(" ", 1)[0]: entry for entry in unset}
    problems = []
    for name, section in settings.channels.items():
        if not section.enabled:
            continue
        for key, value in section.required_secrets().items():
            if value:
                continue
            dotted = f"channels.{name}.{key}"
            hint = unset_by_key.get(dotted)
            reason = f"environment variable {hint.split(' ', 1)[1][2:-1]} is not set" if hint else "is empty"
            problems.append(f"{dotted}: required because channels.{name}.enabled is true, but {reason}")
    return problems


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Load and validate settings; raise :class:`ConfigError` listing every problem found."""
    env = os.environ if env is None else env
    source = find_config_file(path)
    raw: Any = {}
    if source is not None:
        try:
            text = source.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError([f"{source}: cannot read config file ({exc.strerror})"], str(source)) from None
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or "invalid YAML"
            raise ConfigError([f"{source}:{where}: {problem}"], str(source)) from None
        if not isinstance(raw, dict):
            raise ConfigError([f"{source}: top level must be a mapping of keys"], str(source))
    if overrides:
        raw = _deep_merge(raw, dict(overrides))
    try:
        # Validate once to fill defaults (they contain $NAME references too), then substitute.
        filled = Settings.model_validate(raw).model_dump(mode="python", exclude_unset=False)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc), str(source) if source else None) from None
    unset: list[str] = []
    resolved = substitute_env(filled, env, unset=unset)
    try:
        settings = Settings.model_validate(resolved)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc), str(source) if source else None) from None
    problems = _missing_secrets(settings, unset)
    if problems:
        raise ConfigError(problems, str(source) if source else None)
    return settings


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
