from __future__ import annotations

from pydantic import Field

from config.base import ChatChannelSection, from_env


class DingTalkConfig(ChatChannelSection):
    """DingTalk (钉钉) robot in Stream mode. See docs/channels/dingtalk.md.

    ``card_template_id`` switches replies from final-only markdown (via the message's session webhook)
    to an AI card that is streamed in place. ``edit_interval_seconds`` overrides the per-conversation
    spacing of outbound calls kept in ``channels/dingtalk/channel.py`` (1 s for card updates, 3 s for markdown
    messages); leave it unset unless DingTalk's limits change. Without a template, a reply still running
    after ``progress_notice_after_seconds`` gets one "working on it" message (``null``: final text only).

    ``card_actions_key`` names the template's button-list variable (an object array a loop-rendered
    button reads ``label``/``command``/``color`` from, whose callback sends ``command``); set, the AI
    card shows Stop and Approve/Deny as buttons and their presses come back over the stream. Unset (or
    without a template) commands are typed. DingTalk cards get buttons only from their template, which is
    built in the developer console, so this cannot be switched on without one.
    """

    client_id: str | None = from_env("DINGTALK_CLIENT_ID")
    client_secret: str | None = from_env("DINGTALK_CLIENT_SECRET")
    card_template_id: str | None = None
    card_content_key: str = "content"
    card_actions_key: str | None = None
    api_base_url: str = "https://api.dingtalk.com"
    oapi_base_url: str = "https://oapi.dingtalk.com"
    max_file_bytes: int = Field(20 * 1024 * 1024, gt=0)
    edit_interval_seconds: float | None = Field(None, ge=0, le=60)
    progress_notice_after_seconds: float | None = Field(5.0, gt=0, le=600)

    def required_secrets(self) -> dict[str, str | None]:
        return {"client_id": self.client_id, "client_secret": self.client_secret}
