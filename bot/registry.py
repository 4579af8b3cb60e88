"""Which class runs each provider. Import paths, so a disabled platform's SDK is never imported.

Every class is constructed as ``Class(section_config, settings=settings)``.
"""

from __future__ import annotations

import importlib
from typing import Any

CHANNEL_CLASSES: dict[str, str] = {
    "telegram": "channels.telegram:TelegramChannel",
    "slack": "channels.slack:SlackChannel",
    "discord": "channels.discord:DiscordChannel",
    "feishu": "channels.feishu:FeishuChannel",
    "dingtalk": "channels.dingtalk:DingTalkChannel",
    "github": "webhooks.channel:GitHubChannel",
}


def channel_class(provider: str) -> Any:
    module_name, _, class_name = CHANNEL_CLASSES[provider].partition(":")
    return getattr(importlib.import_module(module_name), class_name)
