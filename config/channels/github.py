from __future__ import annotations

from pydantic import Field

from config.base import ChannelSection, Section


class GitHubTrigger(Section):
    """When one event kind fires an agent. ``None`` fields fall back to the event's default."""

    actions: list[str] | None = None
    require_mention: bool | None = None
    mention_login: str | None = None
    allow_authors: list[str] | None = None


class GitHubBinding(Section):
    repo: str
    triggers: dict[str, GitHubTrigger] | None = None


class GitHubAgent(Section):
    name: str
    bot_login: str
    installation_id: int | None = None
    system_prompt: str | None = None
    model: str | None = None
    bindings: list[GitHubBinding] = Field(default_factory=list)


class GitHubConfig(ChannelSection):
    webhook_secret: str | None = None
    app_id: str | None = None
    private_key_path: str | None = None
    api_base_url: str = "https://api.github.com"
    allow_unsigned_webhooks: bool = False
    max_body_bytes: int = 25 * 1024 * 1024
    agents: list[GitHubAgent] = Field(default_factory=list)

    def required_secrets(self) -> dict[str, str | None]:
        if self.allow_unsigned_webhooks:
            return {}
        return {"webhook_secret": self.webhook_secret}
