from __future__ import annotations

from config.base import ChannelSection


class DiscordConfig(ChannelSection):
    bot_token: str | None = None
    api_base_url: str = "https://discord.com/api/v10"
    gateway_url: str | None = None
    mention_only: bool = True
    allowed_guilds: list[str] = []
    max_file_bytes: int = 25 * 1024 * 1024

    def required_secrets(self) -> dict[str, str | None]:
        return {"bot_token": self.bot_token}
