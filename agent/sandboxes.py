"""Choose the sandbox provider for ``sandbox.mode``: one explicit mapping, no discovery."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from agent.sandbox import LocalSandboxProvider, SandboxProvider
from agent.sandbox_bwrap import BwrapSandboxProvider
from config.schema import SandboxConfig

log = logging.getLogger(__name__)

HOST_MODE_WARNING = (
    "sandbox.mode is host: the agent's bash runs as this service's own user and can read its config, "
    "database, environment and every thread's files. Use it only where everyone the bot answers is "
    "trusted with all of that; sandbox.mode: bwrap isolates each command."
)


def build_sandbox_provider(
    config: SandboxConfig, *, base_env: Mapping[str, str] | None = None, skills_dir: Path | None = None
) -> SandboxProvider:
    """The provider for ``config.mode``. A container provider would be one more branch here."""
    if config.mode == "host":
        log.warning(HOST_MODE_WARNING)
        return LocalSandboxProvider(base_env=base_env, limits=config.limits, skills_dir=skills_dir)
    return BwrapSandboxProvider(config, base_env=base_env, skills_dir=skills_dir)
