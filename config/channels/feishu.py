from __future__ import annotations

from config.base import ChannelSection


class FeishuConfig(ChannelSection):
    app_id: str | None = None
    app_secret: str | None = None
    domain: str = "https://open.feishu.cn"
    max_file_bytes: int = 30 * 1024 * 1024

    def required_secrets(self) -> dict[str, str | None]:
        return {"app_id": self.app_id, "app_secret": self.app_secret}
