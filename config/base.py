"""Shared building blocks for the settings schema.

Every settings model forbids unknown keys: a typo in ``config.yaml`` must stop start-up with a line naming
the key, not be silently ignored while the operator wonders why nothing changed.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


def from_env(variable: str) -> Any:
    """A key whose default is ``$variable``: the loader fills it from the environment when the file is silent.

    The default stays ``None`` for code that builds settings directly; only :func:`config.load_settings`
    reads the environment, so the built-in defaults equal ``config.example.yaml`` (which spells them out).
    """
    return Field(None, json_schema_extra={"env": variable})


def _is_str(annotation: Any) -> bool:
    """``str``, ``str | None`` or ``list[str]``: where a platform's numeric id may be written as a number."""
    if annotation is str:
        return True
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation) == (str,)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_is_str(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return False


def _id_text(value: Any) -> Any:
    """``4242`` → ``"4242"`` (Telegram, Discord and GitHub ids are numbers); booleans stay errors."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list):
        return [_id_text(item) for item in value]
    return value


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list or annotation is list:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_is_list(arg) for arg in typing.get_args(annotation))
    return False


class Section(BaseModel):
    """A config section: unknown keys are errors, values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _split_comma_lists(cls, data: Any) -> Any:
        """``allowed_users: "a, b"`` (typically from ``$VAR``) means the list ``[a, b]``; and where a key
        holds text, a number is its digits (``admins: [4242]``: YAML reads an unquoted id as a number)."""
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            value = data.get(name)
            if isinstance(value, str) and _is_list(field.annotation):
                data = {**data, name: [part.strip() for part in value.split(",") if part.strip()]}
            elif isinstance(value, int | list) and _is_str(field.annotation):
                data = {**data, name: _id_text(value)}
        return data


class ChannelSection(Section):
    """Common shape of a channel section. ``enabled`` gates both start-up and secret checks."""

    enabled: bool = False
    #: Platform user ids who may stop anybody's reply and decide anybody's approval request here.
    admins: list[str] = []
    #: Who may approve a risky command (docs/sandbox.md, "Approvers"): ``requester`` (the person who
    #: asked, or an admin) or ``admins`` (only an admin). Unset: ``admins`` in group chats and on GitHub,
    #: ``requester`` in a member's direct messages. A guest's command always needs an admin.
    approvers: Literal["requester", "admins"] | None = None

    def required_secrets(self) -> dict[str, str | None]:
        """Map of key name → value that must be non-empty when the channel is enabled."""
        return {}


#: Everyone who reaches the bot counts as a member (``trust.members: ["*"]``).
EVERYONE = "*"


class TrustSection(Section):
    """``channels.<name>.trust``: who is a member here and what a guest gets (docs/security.md).

    Admins are the channel's ``admins``. Members are the ids listed here (or ``"*"``: everyone who
    reaches the bot), the channel's allow-list, connected accounts, senders an admin paired, and — when
    ``workspace_members`` says so — people the platform vouches for as belonging to the workspace the bot
    is installed in. Everybody else is a guest. The defaults are the safe ones: a stranger's private
    message gets a pairing request, a stranger in a group gets answers without tools or credentials.
    """

    #: Platform user ids who are members here (``"*"``: everyone who can reach the bot).
    members: list[str] = []
    #: Whether a sender the platform reports as a member of the bot's workspace (a Slack team member,
    #: a Feishu tenant or DingTalk organisation user, a member of a Discord server in ``allowed_guilds``
    #: or a holder of one of Discord's ``member_roles``) is a member here, or only a guest.
    workspace_members: Literal["member", "guest"] = "member"
    #: What a guest gets in a private chat: ``pair`` (a pairing code an admin approves with
    #: ``/pair CODE``), ``chat_only`` (answers, no tools that act, no credentials) or ``ignore`` (nothing).
    guests: Literal["ignore", "chat_only", "pair"] = "pair"
    #: What a guest gets in a group (no pairing there: a code in a group is no secret).
    group_guests: Literal["ignore", "chat_only"] = "chat_only"


class ChatChannelSection(ChannelSection):
    """A chat platform's section: the common keys plus its ``trust`` policy."""

    trust: TrustSection = Field(default_factory=TrustSection)
