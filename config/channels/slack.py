"""Slack channel settings (Socket Mode app with a bot token and an app-level token)."""

from __future__ import annotations

from pydantic import Field

from config.base import ChatChannelSection, from_env


class SlackConfig(ChatChannelSection):
    #: Bot User OAuth token (``xoxb-…``): Web API calls and private file downloads.
    bot_token: str | None = from_env("SLACK_BOT_TOKEN")
    #: App-level token (``xapp-…``, scope ``connections:write``): opens the Socket Mode connection.
    app_token: str | None = from_env("SLACK_APP_TOKEN")
    #: Web API root; must end with ``/`` (slack-sdk appends method names to it).
    api_base_url: str = "https://slack.com/api/"
    #: Slack user ids (``U…``) allowed to talk to the bot; empty = everyone in the workspace.
    allowed_users: list[str] = []
    max_file_bytes: int = 50 * 1024 * 1024
    #: In a channel thread the bot was mentioned in, answer later replies without a new mention
    #: (needs the ``message.channels``/``message.groups`` events and ``channels:history``/``groups:history``).
    thread_follow_ups: bool = True
    #: Spacing of reply calls (post/update) per channel. chat.update is Tier 3 (about 50/min).
    edit_interval_seconds: float = Field(1.2, ge=0, le=60)
    #: Stream answers in threads (channel threads and DM threads) with chat.startStream / appendStream /
    #: stopStream instead of chat.update; a top-level DM message has no thread and keeps chat.update.
    #: Off by default: Slack's stream cannot show the ⏹ Stop button while it is written (typed /stop
    #: still works with it on).
    native_streaming: bool = False
    #: While nothing visible changes in a thread, "is thinking…" (assistant.threads.setStatus) is set
    #: again after this many seconds.
    status_interval_seconds: float = Field(5.0, gt=0, le=120)
    #: The app's one slash command (see deploy/slack-manifest.yaml): ``/switchboard status`` runs
    #: ``/status``. Any other slash command of the app still arrives as the same text typed in chat.
    slash_command: str = Field("/switchboard", pattern=r"^/[a-z0-9_-]{1,31}$")
    #: Socket Mode keep-alive ping; a connection silent for 4 pings is considered dead.
    ping_interval_seconds: float = Field(10, gt=0, le=300)
    #: Longest wait between reconnect attempts (exponential backoff from 1 s up to this).
    reconnect_max_seconds: float = Field(60, gt=0, le=3600)

    def required_secrets(self) -> dict[str, str | None]:
        return {"bot_token": self.bot_token, "app_token": self.app_token}
