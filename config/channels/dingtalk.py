from __future__ import annotations

from config.base import ChannelSection


class DingTalkConfig(ChannelSection):
    client_id: str | None = None
    client_secret: str | None = None
    card_template_id: str | None = None
    api_base_url: str = "https://api.dingtalk.com"
    max_file_bytes: int = 20 * 1024 * 1024

    def required_secrets(self) -> dict[str, str | None]:
        return {"client_id": self.client_id, "client_secret": self.client_secret}
