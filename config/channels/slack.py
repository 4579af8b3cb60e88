from __future__ import annotations

from config.base import ChannelSection


class SlackConfig(ChannelSection):
    bot_token: str | None = None
    app_token: str | None = None
    api_base_url: str = "https://slack.com/api/"
    allowed_users: list[str] = []
    max_file_bytes: int = 50 * 1024 * 1024

    def required_secrets(self) -> dict[str, str | None]:
        return {"bot_token": self.bot_token, "app_token": self.app_token}
