"""Load settings: find the file, read YAML, apply the environment, read secret files, validate.

The environment is applied *before* validation, so ``port: $PORT``, ``enabled: ${TG_ON:-false}`` or a
list from a variable coerce like values written in the file, and validators see the real value. In order:

1. ``$NAME``, ``${NAME}`` and ``${NAME:-default}`` are replaced anywhere inside a string of the file
   (``$$`` is a literal ``$``). A value that is exactly one reference to an unset variable becomes
   ``null``; a reference inside a longer string to an unset variable is an error.
2. ``SWITCHBOARD_<SECTION>__<KEY>`` variables override keys (``__`` nests, a number indexes a list); their
   values are taken literally, ``[…]``/``{…}`` parsed as YAML flow (JSON works).
3. Keys whose default comes from a variable (``channels.telegram.bot_token`` ← ``$TELEGRAM_BOT_TOKEN``,
   declared with :func:`config.base.from_env`) are filled from it when the file does not set them, so the
   built-in defaults equal ``config.example.yaml``.
4. ``<key>_file: PATH`` anywhere reads ``<key>`` from a file (container secrets), trailing newline dropped.

Every problem becomes one :class:`ConfigError` line that names the key (and, for the environment, the
variable), so ``switchboard serve`` can print what to fix instead of a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from config.base import ChannelSection
from config.schema import ChannelsConfig, Settings, overlaps

CONFIG_ENV_VAR = "SWITCHBOARD_CONFIG"
DEFAULT_CONFIG_FILE = "config.yaml"
OVERRIDE_PREFIX = "SWITCHBOARD_"
FILE_SUFFIX = "_file"

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# ``$$`` | ``${NAME}`` / ``${NAME:-default}`` | ``$NAME`` | an opening ``${`` that matched nothing above.
_REF = re.compile(rf"\$\$|\$\{{(?P<braced>{_NAME})(?::-(?P<default>[^}}]*))?\}}|\$(?P<bare>{_NAME})|\$\{{")
_WHOLE_REF = re.compile(rf"^\$(?:\{{(?P<braced>{_NAME})\}}|(?P<bare>{_NAME}))$")


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


class _Resolution:
    """What the environment did to which key, so validation errors can name the variable behind a value."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        #: dotted key → variable that was referenced as the whole value but is unset.
        self.unset: dict[str, str] = {}
        #: dotted key → where its value came from (``$PORT``, ``SWITCHBOARD_SERVER__PORT``, a file).
        self.origin: dict[str, str] = {}


def _env_value(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value else None


def parse_env_text(text: str) -> Any:
    """A variable's text as a config value: ``[…]``/``{…}`` is YAML flow (so JSON too), else the string.

    Scalars stay strings on purpose: the schema coerces ``"8080"`` to an int or ``"true"`` to a bool only
    where a key expects one, and a token that happens to look like a number stays a token.
    """
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        return yaml.safe_load(stripped)
    return text


def substitute_env(value: Any, env: Mapping[str, str], path: str = "", res: _Resolution | None = None) -> Any:
    """Replace ``$NAME``, ``${NAME}`` and ``${NAME:-default}`` inside every string of ``value``."""
    res = res if res is not None else _Resolution()
    if isinstance(value, dict):
        return {k: substitute_env(v, env, _join(path, k), res) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, _join(path, i), res) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value
    whole = _WHOLE_REF.match(value.strip())
    if whole:
        name = whole.group("braced") or whole.group("bare")
        found = _env_value(env, name)
        if found is None:
            res.unset[path] = name
            return None
        res.origin[path] = f"${name}"
        try:
            return parse_env_text(found)
        except yaml.YAMLError:
            res.problems.append(f"{path}: ${name} starts like a list or mapping but is not valid YAML/JSON")
            return None

    def replace(match: re.Match[str]) -> str:
        text = match.group(0)
        if text == "$$":
            return "$"
        if text == "${":
            res.problems.append(f"{path}: unterminated ${{ (write $$ for a literal $)")
            return text
        name = match.group("braced") or match.group("bare")
        found = _env_value(env, name)
        if found is not None:
            res.origin.setdefault(path, f"${name}")
            return found
        if match.group("default") is not None:
            return match.group("default")
        res.problems.append(f"{path}: environment variable {name} is not set (write ${{{name}:-}} for empty)")
        return text

    return _REF.sub(replace, value)


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def env_overrides(raw: dict[str, Any], env: Mapping[str, str], res: _Resolution) -> dict[str, Any]:
    """Apply ``SWITCHBOARD_<SECTION>__<KEY>=value`` on top of the file's values.

    Only variables whose first part names a top-level key count, so ``SWITCHBOARD_CONFIG`` (the file's
    path) or a variable another tool uses, like ``SWITCHBOARD_TEST_PG_URL``, is never mistaken for a key.
    """
    merged = dict(raw)
    for var in sorted(env):
        if not var.startswith(OVERRIDE_PREFIX) or var == CONFIG_ENV_VAR:
            continue
        parts = [p.lower() for p in var[len(OVERRIDE_PREFIX) :].split("__")]
        top = parts[0].removesuffix(FILE_SUFFIX) if len(parts) == 1 else parts[0]
        if top not in Settings.model_fields or any(not p for p in parts):
            continue
        try:
            value = parse_env_text(env[var])
        except yaml.YAMLError:
            res.problems.append(
                f"{'.'.join(parts)}: {var} starts like a list or mapping but is not valid YAML/JSON"
            )
            continue
        problem = _set_path(merged, parts, value)
        if problem:
            res.problems.append(f"{'.'.join(parts)}: {problem} (from {var})")
        else:
            res.origin[".".join(parts)] = var
    return merged


def _set_path(root: dict[str, Any], parts: list[str], value: Any) -> str | None:
    node: Any = root
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                return f"{'.'.join(parts[:depth]) or part} has no entry {part}"
            index = int(part)
            if last:
                node[index] = value
                return None
            if not isinstance(node[index], dict):
                node[index] = {}
            node[index] = dict(node[index])
            node = node[index]
            continue
        if not isinstance(node, dict):
            return f"{'.'.join(parts[:depth])} is not a section"
        if last:
            node[part] = value
            return None
        child = node.get(part)
        if child is None and depth == 0 and parts[1].isdigit():
            child = _dumped_default(part)
        if isinstance(child, list):
            node[part] = list(child)
        elif isinstance(child, dict):
            node[part] = dict(child)
        else:
            node[part] = {}
        node = node[part]
    return None


def _dumped_default(top: str) -> Any:
    """The default of a top-level list key as plain data, so ``SWITCHBOARD_MODELS__0__…`` can patch it."""
    default = Settings.model_fields[top].get_default(call_default_factory=True)
    if isinstance(default, list):
        return [d.model_dump(exclude_unset=True) if isinstance(d, BaseModel) else d for d in default]
    return None


def env_defaults(model: type[BaseModel], raw: Mapping[str, Any]) -> dict[str, Any]:
    """``$NAME`` references for the keys ``raw`` leaves out whose default comes from the environment."""
    injected: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        annotation = field.annotation
        is_section = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        given = raw.get(name)
        if name in raw or f"{name}{FILE_SUFFIX}" in raw:
            if is_section and isinstance(given, Mapping):
                nested = env_defaults(annotation, given)  # type: ignore[arg-type]
                if nested:
                    injected[name] = nested
            continue
        if "env" in extra:
            injected[name] = f"${extra['env']}"
        elif is_section:
            nested = env_defaults(annotation, {})  # type: ignore[arg-type]
            if nested:
                injected[name] = nested
        elif field.default_factory is not None:
            dumped = _dumped_default(name) if model is Settings else None
            if dumped and "$" in repr(dumped):
                injected[name] = dumped
    return injected


def read_secret_files(value: Any, path: str, res: _Resolution) -> Any:
    """Turn every ``<key>_file: PATH`` into ``<key>: <the file's text>``."""
    if isinstance(value, list):
        return [read_secret_files(v, _join(path, i), res) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        dotted = _join(path, key)
        if not (isinstance(key, str) and key.endswith(FILE_SUFFIX) and len(key) > len(FILE_SUFFIX)):
            out[key] = read_secret_files(item, dotted, res)
            continue
        target = key.removesuffix(FILE_SUFFIX)
        target_dotted = _join(path, target)
        if item is None:
            continue
        if value.get(target) is not None:
            res.problems.append(f"{target_dotted}: set either {target} or {key}, not both")
            continue
        file = Path(str(item)).expanduser()
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            res.problems.append(f"{dotted}: cannot read {file} ({exc.strerror or exc})")
            continue
        except UnicodeDecodeError:
            res.problems.append(f"{dotted}: {file} is not UTF-8 text")
            continue
        out[target] = text.removesuffix("\n").removesuffix("\r")
        res.origin[target_dotted] = f"file {file}"
    return out


def _format_validation_error(error: ValidationError, res: _Resolution) -> list[str]:
    lines = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"] if not str(p).startswith("function-after"))
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        if not loc and "\n" in message:  # cross-section checks: one located problem a line
            lines += message.splitlines()
            continue
        if loc in res.unset:
            message = f"environment variable {res.unset[loc]} is not set ({message})"
        elif loc in res.origin:
            message = f"{message} (from {res.origin[loc]})"
        lines.append(f"{loc or '(top level)'}: {message}")
    return lines


def _missing_secrets(channels: list[tuple[str, ChannelSection]], res: _Resolution) -> list[str]:
    problems = []
    for name, section in channels:
        if not section.enabled:
            continue
        for key, value in section.required_secrets().items():
            if value:
                continue
            dotted = f"channels.{name}.{key}"
            var = res.unset.get(dotted)
            reason = f"environment variable {var} is not set" if var else "is empty"
            problems.append(f"{dotted}: required because channels.{name}.enabled is true, but {reason}")
    return problems


def _channels_alone(resolved: Mapping[str, Any]) -> list[tuple[str, ChannelSection]]:
    """Each channel section that is valid by itself, so a missing secret is reported even when another
    key (in that channel or elsewhere) is bad: ``config check`` shows every problem at once."""
    given = resolved.get("channels")
    if not isinstance(given, Mapping):
        return []
    valid: list[tuple[str, ChannelSection]] = []
    for name, field in ChannelsConfig.model_fields.items():
        model = field.annotation
        if name not in given or not (isinstance(model, type) and issubclass(model, ChannelSection)):
            continue
        section = given[name]
        if isinstance(section, Mapping):
            # An unknown key stops validation; leave it out here, its own line is reported already.
            section = {k: v for k, v in section.items() if k in model.model_fields}
        try:
            valid.append((name, model.model_validate(section)))
        except ValidationError:
            continue  # its own problems are among the Settings errors already
    return valid


def _read_file(source: Path) -> dict[str, Any]:
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
    return raw


def resolve(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], _Resolution, str | None]:
    """The file with the environment applied and secret files read — the data the schema validates.

    Problems met on the way are collected in the returned resolution, not raised, so a caller can
    report them together with what validation finds (``switchboard config check`` shows everything).
    """
    env = os.environ if env is None else env
    source = find_config_file(path)
    where = str(source) if source else None
    raw: dict[str, Any] = _read_file(source) if source is not None else {}
    if overrides:
        raw = _deep_merge(raw, dict(overrides))
    res = _Resolution()
    resolved = substitute_env(raw, env, res=res)
    resolved = env_overrides(resolved, env, res)
    defaults = substitute_env(env_defaults(Settings, resolved), env, res=res)
    resolved = _deep_merge(defaults, resolved)
    resolved = read_secret_files(resolved, "", res)
    return resolved, res, where


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Load and validate settings; raise :class:`ConfigError` listing every problem found, all at once.

    ``overrides`` (for tests and tools) are merged over the file before substitution, like file values.
    """
    resolved, res, where = resolve(path, env=env, overrides=overrides)
    problems = list(res.problems)
    settings: Settings | None = None
    try:
        settings = Settings.model_validate(resolved)
    except ValidationError as exc:
        reported = {line.split(":", 1)[0] for line in problems}
        problems += [
            line for line in _format_validation_error(exc, res) if line.split(":", 1)[0] not in reported
        ]
    channels = settings.channels.items() if settings is not None else _channels_alone(resolved)
    problems += _missing_secrets(channels, res)
    if settings is not None and where is not None:
        problems += _acp_mounts_over(Path(where), settings)
    if problems or settings is None:
        raise ConfigError(problems, where)
    return settings


def _acp_mounts_over(config_file: Path, settings: Settings) -> list[str]:
    """A coding agent's mounts never show it this config file (its tokens and keys)."""
    return [
        f"agent.subagents.profiles: {profile.name}: acp.mounts: {mount} {problem}"
        for profile in settings.agent.subagents.profiles
        for mount in (profile.acp.mounts if profile.acp is not None else [])
        if (problem := overlaps(Path(mount), [("config file", config_file)]))
    ]


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
