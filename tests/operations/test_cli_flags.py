"""Global flags work before and after any subcommand; ``--version`` needs no config."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bot.cli import build_parser, version


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "debug", "--log-format", "text", "--config", "c.yaml", "serve"],
        ["serve", "--log-level", "DEBUG", "--log-format", "text", "--config", "c.yaml"],
        ["--log-format", "text", "serve", "--config", "c.yaml", "--log-level", "debug"],
    ],
)
def test_global_flags_anywhere(argv):
    args = build_parser().parse_args(argv)
    assert (args.command, args.log_level, args.log_format, args.config) == (
        "serve",
        "DEBUG",
        "text",
        "c.yaml",
    )


def test_flags_after_a_nested_plugin_subcommand():
    args = build_parser().parse_args(["token", "create", "--user", "ann", "--log-level", "ERROR"])
    assert args.log_level == "ERROR" and args.config is None and args.log_format is None


def test_defaults_when_no_flag_is_given():
    args = build_parser().parse_args(["chat"])
    assert (args.log_level, args.log_format, args.config) == ("INFO", None, None)


def test_version_prints_the_package_version():
    result = subprocess.run(
        [sys.executable, "-m", "bot", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert result.stdout.strip() == f"switchboard {version()}"
    assert version()[0].isdigit()
