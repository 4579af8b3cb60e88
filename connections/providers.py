"""What each platform looks like to a person connecting it: title, whether it can be connected, and the
instruction (and Telegram deep link) that goes with a code.

A provider is *enabled* when its config section says so or when the service runs a channel for it (tests
and embedders pass channels in directly).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from config.schema import Settings

TITLES = {
    "telegram": "Telegram",
    "slack": "Slack",
    "discord": "Discord",
    "feishu": "Feishu / Lark",
    "dingtalk": "DingTalk",
    "github": "GitHub",
    "web": "Web chat",
}
NOT_CONNECTABLE = {
    "github": "GitHub is connected per repository by an operator, not per person with a code",
    "web": "the web chat (/chat) is you, signed in to this server: there is nothing to connect",
}


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    name: str
    title: str
    enabled: bool
    connectable: bool
    #: Why a code cannot be made for this provider right now (None when it can).
    reason: str | None


def known_providers(settings: Settings, live: Iterable[str]) -> list[str]:
    names = [name for name, _section in settings.channels.items()]
    names += sorted(set(live) - set(names))
    return names


def provider_info(settings: Settings, name: str, live: Iterable[str]) -> ProviderInfo | None:
    """None for a provider this server has never heard of (the API answers 404)."""
    live = set(live)
    if name not in known_providers(settings, live):
        return None
    section = getattr(settings.channels, name, None)
    enabled = name in live or bool(section is not None and section.enabled)
    reason: str | None = NOT_CONNECTABLE.get(name)
    connectable = reason is None
    if reason is None and not enabled:
        reason = f"{TITLES.get(name, name)} is not enabled on this server (an operator sets channels.{name}.enabled: true)"
    return ProviderInfo(
        name=name,
        title=TITLES.get(name, name.title()),
        enabled=enabled,
        connectable=connectable,
        reason=reason,
    )


def telegram_username(settings: Settings, handle: str | None) -> str:
    """The bot's Telegram username: what getMe said (``handle``, from the running channel), else config."""
    return (handle or settings.channels.telegram.bot_username or "").lstrip("@").strip()


def deep_link(settings: Settings, provider: str, code: str, handle: str | None = None) -> str | None:
    """A link that opens the chat with the bot and sends the code (Telegram ``?start=`` only)."""
    if provider == "telegram":
        username = telegram_username(settings, handle)
        if username:
            return f"https://t.me/{username}?start={code}"
    return None


def instruction(settings: Settings, provider: str, code: str, handle: str | None = None) -> str:
    """What to do with the code, true for that platform: each one takes commands differently.

    Slack keeps ``/…`` typed in a message box for its own slash commands, so a person uses the app's one
    slash command (``/switchboard connect CODE``); Discord offers its registered ``/connect`` command in
    its picker; Telegram's deep link sends ``/start CODE`` by itself.
    """
    title = TITLES.get(provider, provider)
    if provider == "telegram":
        username = telegram_username(settings, handle)
        if username:
            return f"Open the link, or send /start {code} to @{username} in Telegram."
        return f"Send /start {code} to the bot in Telegram."
    if provider == "slack":
        command = settings.channels.slack.slash_command
        return f"In Slack, send {command} connect {code} (in a direct message with the app, or any channel)."
    if provider == "discord" and settings.channels.discord.slash_commands:
        return f"In Discord, type /connect, pick the bot's command and paste {code} (a direct message works best)."
    return f"Send /connect {code} to the bot in {title} (a direct message works best)."
