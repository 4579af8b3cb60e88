from __future__ import annotations

from pydantic import Field, field_validator

from config.base import ChatChannelSection, from_env


class DiscordConfig(ChatChannelSection):
    """``channels.discord``. ``api_base_url``/``gateway_url`` exist so tests (or a proxy) can stand in
    for Discord; discord.py keeps both as process-wide globals, so one process talks to one API base."""

    bot_token: str | None = from_env("DISCORD_BOT_TOKEN")
    api_base_url: str = "https://discord.com/api/v10"
    gateway_url: str | None = None
    mention_only: bool = True
    allowed_guilds: list[str] = []
    #: Role ids (Developer Mode → Server Settings → Roles → *Copy Role ID*) whose holders are workspace
    #: members in any server the bot is allowed in: a role is how a public server says who is staff.
    member_roles: list[str] = []
    #: Largest file the bot attaches to a reply (Discord's default upload cap is 25 MiB).
    max_file_bytes: int = Field(25 * 1024 * 1024, gt=0)
    #: Spacing of reply calls (send/edit) per channel. Discord allows about 5 messages per 5 s per
    #: channel; lower only for tests or a proxy that paces for you.
    edit_interval_seconds: float = Field(1.0, ge=0, le=60)
    #: Seconds discord.py waits after the last GUILD_CREATE before it calls the client ready.
    guild_ready_timeout: float = Field(default=2.0, ge=0)
    #: How long start() waits for the gateway's READY before reporting the channel as failed.
    connect_timeout: float = Field(default=30.0, gt=0)
    #: After a restart (or a gateway session Discord would not resume) read back messages missed in the
    #: channels, threads and DMs the bot follows, at most this many minutes old; 0 turns backfill off.
    backfill_minutes: int = Field(default=60, ge=0, le=7 * 24 * 60)

    #: Register the service's commands as Discord slash commands (one bulk overwrite at start, only when
    #: they changed) and answer them as interactions. Typed commands work either way.
    slash_commands: bool = True
    #: A slash command not answered this many seconds after it arrived is deferred ("thinking…");
    #: Discord needs the first callback within 3 s, so at most 2 (a margin for a loaded event loop).
    defer_after_seconds: float = Field(default=1.0, ge=0, le=2.0)

    @field_validator("member_roles")
    @classmethod
    def _role_ids(cls, roles: list[str]) -> list[str]:
        """A role name would silently match nobody; Discord identifies roles only by id."""
        for role in roles:
            if not (role.isascii() and role.isdigit()):
                raise ValueError(f"{role!r} is not a role id (Server Settings → Roles → Copy Role ID)")
        return roles

    def required_secrets(self) -> dict[str, str | None]:
        return {"bot_token": self.bot_token}
