"""Which class runs each provider. Import paths, so a disabled platform's SDK is never imported.

Every class is constructed as ``Class(section_config, settings=settings)``.
"""

from __future__ import annotations

import importlib
from typing import Any

CHANNEL_CLASSES: dict[str, str] = {
    "telegram": "channels.telegram.channel:TelegramChannel",
    "slack": "channels.slack.channel:SlackChannel",
    "discord": "channels.discord.channel:DiscordChannel",
    "feishu": "channels.feishu.channel:FeishuChannel",
    "dingtalk": "channels.dingtalk.channel:DingTalkChannel",
    "github": "webhooks.channel:GitHubChannel",
    "web": "channels.web.channel:WebChannel",
}


#: Our own top-level packages: a missing one is a broken install, not a missing extra.
_OWN_PACKAGES = frozenset({"bot", "channels", "config", "connections", "agent", "webhooks"})


class MissingExtra(Exception):
    """An enabled channel's SDK is not installed; the message is the one line that fixes it."""


def install_hint(extra: str, missing: str | None) -> str:
    from bot.version import DISTRIBUTION

    return f"pip install '{DISTRIBUTION}[{extra}]' (missing Python module {missing})"


def channel_class(provider: str) -> Any:
    """The channel's class; :class:`MissingExtra` names the extra to install when its SDK is absent."""
    module_name, _, class_name = CHANNEL_CLASSES[provider].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "?").split(".")[0]
        if top in _OWN_PACKAGES:
            raise
        raise MissingExtra(
            f"channels.{provider} is enabled but its SDK is not installed: {install_hint(provider, top)}"
        ) from None
    return getattr(module, class_name)


def missing_extras(settings: Any) -> list[str]:
    """One line per enabled channel (and the PostgreSQL driver) whose packages are not installed."""
    problems = []
    for provider, section in settings.channels.items():
        if section.enabled:
            try:
                channel_class(provider)
            except MissingExtra as exc:
                problems.append(str(exc))
    url = settings.database.url
    if url.startswith("postgresql"):
        for module in ("asyncpg", "langgraph.checkpoint.postgres", "psycopg_pool"):
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                missing = (exc.name or module).split(".")[0]
                problems.append(f"database.url is PostgreSQL but {install_hint('postgres', missing)}")
                break
    return problems
