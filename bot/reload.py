"""``SIGHUP``: read the config again and apply, in place, what can change without dropping anything.

What changes safely is what is read afresh for each message or turn: a channel's ``admins``, ``trust``
and ``approvers`` (who may do what, looked up per message), the ``models`` (looked up per turn; a running
turn keeps the model object it started with), the approval rules (``sandbox.approval`` between
``risky`` and ``always``, ``sandbox.risky_patterns``: judged per command of a new turn) and the agent's
``system_prompt``, ``timezone`` and ``recursion_limit`` (read as each turn starts), and ``budgets``
(checked before each turn). Everything else
— connections, listeners, pools, the sandbox, MCP servers — was built from the config at start-up, so a
change there is logged as needing a restart and left alone; the running values stay in effect.

A config that does not load (or a model that cannot be built) changes nothing: the log says why, once
per problem, and the service keeps running on what it had.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from config import ConfigError, load_settings
from config.base import ChatChannelSection
from config.schema import Settings

if TYPE_CHECKING:
    from bot.service import Service

log = logging.getLogger("switchboard.reload")

#: Per channel: read per message through the channel object (``Channel.admins`` / ``trust`` / ``approvers``).
CHANNEL_KEYS = ("admins", "trust", "approvers")
#: Judged per command of each new turn, once the agent runs.
SANDBOX_KEYS = ("approval", "risky_patterns")
#: Read from the settings at the start of each turn (the system prompt, the date line's zone, the limit).
AGENT_KEYS = ("agent.system_prompt", "agent.timezone", "agent.recursion_limit")


@dataclass
class ReloadReport:
    """What a reload did: keys applied, keys that need a restart, problems that stopped it."""

    applied: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def changed_keys(old: dict[str, Any], new: dict[str, Any], prefix: str = "", depth: int = 0) -> list[str]:
    """Dotted keys whose values differ: ``<section>.<key>``, and ``channels.<name>.<key>``."""
    keys: list[str] = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        dotted = f"{prefix}{name}"
        nested = depth == 0 or (depth == 1 and prefix == "channels.")
        if nested and isinstance(before, dict) and isinstance(after, dict):
            keys += changed_keys(before, after, f"{dotted}.", depth + 1)
        else:
            keys.append(dotted)
    return keys


async def apply(service: Service, new: Settings) -> ReloadReport:
    """Apply ``new`` to the running ``service`` where safe; report the rest.

    The models go first: they are the one change that can still fail (a class that cannot be built),
    and a reload that fails applies nothing.
    """
    from agent.models import ModelLoadError

    report = ReloadReport()
    current = service.settings
    runtime = _runtime(service)
    keys = changed_keys(current.model_dump(mode="json"), new.model_dump(mode="json"))
    if "models" in keys and runtime is not None:
        try:
            replaced = await asyncio.to_thread(runtime.replace_models, list(new.models))
        except ModelLoadError as exc:
            report.problems.append(f"models: {exc}")
            return report
        await retire_models(replaced)
    for key in keys:
        parts = key.split(".")
        if parts[0] == "channels" and len(parts) == 3 and parts[2] in CHANNEL_KEYS:
            _apply_channel_key(service, parts[1], parts[2], new)
            report.applied.append(key)
        elif key == "models" and runtime is not None:
            report.applied.append(key)
        elif parts[0] == "budgets":  # read at every turn's check (bot/spend/budgets.py)
            current.budgets = new.budgets
            report.applied.append(key)
        elif key in AGENT_KEYS:
            _apply_agent_key(current, key, new)
            report.applied.append(key)
        elif parts[0] == "sandbox" and len(parts) == 2 and parts[1] in SANDBOX_KEYS and runtime is not None:
            if key == "sandbox.approval" and "never" in (current.sandbox.approval, new.sandbox.approval):
                report.restart.append(key)  # turning approvals on or off adds or removes the approval desk
                continue
            current.sandbox.approval = new.sandbox.approval
            current.sandbox.risky_patterns = list(new.sandbox.risky_patterns)
            runtime.replace_risk_rules(current.sandbox.approval, list(current.sandbox.risky_patterns))
            report.applied.append(key)
        else:
            report.restart.append(key)  # built at start-up (or the agent is still being built)
    return report


async def retire_models(models: list[Any]) -> None:
    """Close the replaced models' connection pools once no call uses them (a turn that holds one goes
    on to its end): without this, every reload left one open pool behind for the life of the process.

    Only the default class has a pool of its own to close; ``ChatOpenAI`` shares the ``openai`` SDK's
    process-wide client, and other classes are left as they are.
    """
    from agent.chat_completions import ChatCompletions

    for model in models:
        if isinstance(model, ChatCompletions):
            await model.retire()


def _apply_channel_key(service: Service, provider: str, key: str, new: Settings) -> None:
    """One of :data:`CHANNEL_KEYS` into the settings and, when the channel runs, into its object."""
    section = dict(new.channels.items())[provider]
    mine = dict(service.settings.channels.items())[provider]
    channel = service.channels.get(provider)
    if key == "admins":
        mine.admins = list(section.admins)
        if channel is not None:
            channel.admins = frozenset(section.admins)
    elif key == "approvers":
        mine.approvers = section.approvers
        if channel is not None:
            channel.approvers = section.approvers
    elif isinstance(section, ChatChannelSection) and isinstance(mine, ChatChannelSection):
        mine.trust = section.trust
        if channel is not None:
            channel.trust = section.trust


def _apply_agent_key(current: Settings, key: str, new: Settings) -> None:
    if key == "agent.system_prompt":
        current.agent.system_prompt = new.agent.system_prompt
    elif key == "agent.timezone":
        current.agent.timezone = new.agent.timezone
    else:
        current.agent.recursion_limit = new.agent.recursion_limit


def _runtime(service: Service) -> Any:
    """The agent runtime once it is built (None while ``serve`` is still starting it)."""
    from agent.runtime import AgentRuntime

    return service.agent if isinstance(service.agent, AgentRuntime) else None


async def reload_from(service: Service, path: str | None, adjust: Any = None) -> ReloadReport:
    """Read the config file again (``path`` as ``serve`` was given it) and apply it; log the outcome."""
    try:
        new = await asyncio.to_thread(load_settings, path)
    except ConfigError as exc:
        report = ReloadReport(problems=list(exc.problems))
    else:
        if adjust is not None:
            adjust(new)  # what the command line overrides (serve --host/--port) stays overridden
        from bot.logs import mask_also
        from config.secrets import known_secrets

        mask_also(known_secrets(new, os.environ))  # a new token or key is masked before anything logs it
        report = await apply(service, new)
    log_report(report)
    return report


def log_report(report: ReloadReport) -> None:
    if report.problems:
        for problem in report.problems:
            log.error("reload: %s", problem)
        changed = ", ".join(report.applied) or "nothing"
        log.error("reload: the configuration has problems; applied: %s", changed)
        return
    log.info(
        "reload: applied %s; needs a restart: %s",
        ", ".join(report.applied) or "nothing",
        ", ".join(report.restart) or "nothing",
        extra={"fields": {"applied": report.applied, "needs_restart": report.restart}},
    )
