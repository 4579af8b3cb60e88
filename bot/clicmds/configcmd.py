"""``switchboard config schema | check | show``: the configuration contract, checked and shown offline.

``check`` answers before a deployment what ``serve`` would refuse at start-up — every problem at once,
one line each, without connecting to anything — plus what only importing code can tell: a ``models[]``
key the model class does not take, a platform whose SDK is missing. ``show`` prints the configuration
the service would run with (file, environment and defaults merged), secrets masked, so an operator can
see which value won without reading the loader's rules.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import yaml
from pydantic import ValidationError

from config import ConfigError, Settings
from config.loader import find_config_file, load_settings, resolve
from config.schema import ModelConfig
from config.secrets import MASK, SecretMasker, is_secret_name, known_secrets, url_password

EXIT_PROBLEMS = 2  # as `serve` exits on a configuration problem


def register(subparsers: Any, load_or_exit: Callable[[str | None], Any]) -> None:
    config = subparsers.add_parser("config", help="print the JSON Schema, check a config offline, show it")
    actions = config.add_subparsers(dest="config_command", required=True)
    actions.add_parser("schema", help="the JSON Schema of config.yaml").set_defaults(func=cmd_schema)
    actions.add_parser(
        "check", help="report every problem in the config at once, one line each (connects to nothing)"
    ).set_defaults(func=cmd_check)
    actions.add_parser(
        "show", help="the effective config (file + environment + defaults), secrets masked"
    ).set_defaults(func=lambda args: cmd_show(args, load_or_exit))


def cmd_schema(args: argparse.Namespace) -> int:
    schema = Settings.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Switchboard config.yaml"
    print(json.dumps(schema, indent=2))
    return 0


def model_problems(resolved: dict[str, Any]) -> list[str]:
    """Each ``models[]`` entry checked against its class, even when other sections have problems."""
    from agent.models import check_model  # imports the model classes: only for `config check`

    entries = resolved.get("models")
    problems: list[str] = []
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        try:
            cfg = ModelConfig.model_validate(entry)
        except ValidationError:
            continue  # its schema problems are reported with the rest
        problems += check_model(cfg, f"models.{index}")
    return problems


def settings_problems(settings: Settings) -> list[str]:
    """What `serve` refuses before it starts that the schema alone cannot see."""
    from bot.registry import missing_extras
    from config.hosts import is_loopback

    problems = list(missing_extras(settings))
    if settings.auth.mode == "none" and not is_loopback(settings.server.host):
        problems.append(
            f"server.host: {settings.server.host} is reachable from other machines but auth.mode is none; "
            "listen on 127.0.0.1 or set auth.mode: jwt"
        )
    return problems


def collect(path: str | None) -> tuple[list[str], str | None]:
    """Every problem ``serve`` would report for this config, and the file it came from."""
    try:
        resolved, _, where = resolve(path)
    except ConfigError as exc:  # the file cannot be read or is not YAML: nothing more to check
        return exc.problems, exc.source
    problems: list[str] = []
    try:
        settings = load_settings(path)
    except ConfigError as exc:
        problems += exc.problems
    else:
        problems += settings_problems(settings)
    problems += model_problems(resolved)
    return problems, where


def cmd_check(args: argparse.Namespace) -> int:
    problems, where = collect(args.config)
    source = where or "the built-in defaults"
    if not problems:
        print(f"{source}: no problems found")
        return 0
    for line in problems:
        print(line)
    print(f"{source}: {len(problems)} problem{'s' if len(problems) != 1 else ''}", file=sys.stderr)
    return EXIT_PROBLEMS


def masked(value: Any, masker: SecretMasker, key: str = "") -> Any:
    """Secret-looking keys and URL passwords replaced whatever their length, and every value passed
    through the masker logs use (a secret under an innocent key: a header, an MCP argument).

    Masked value by value, not on the printed text, so the output stays YAML that parses."""
    if isinstance(value, dict):
        return {k: masked(v, masker, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, masker, key) for v in value]
    if isinstance(value, str) and value:
        if is_secret_name(key):
            return MASK
        password = url_password(value)
        if password:
            value = value.replace(f":{password}@", f":{MASK}@")
        return masker(value)
    return value


def cmd_show(args: argparse.Namespace, load_or_exit: Callable[[str | None], Any]) -> int:
    settings: Settings = load_or_exit(args.config)
    source = find_config_file(args.config)
    masker = SecretMasker(known_secrets(settings, os.environ))
    shown = masked(settings.model_dump(mode="json"), masker)
    print(f"# effective configuration from {source or 'the built-in defaults'} and the environment")
    print(yaml.safe_dump(shown, sort_keys=False, allow_unicode=True), end="")
    return 0
