from __future__ import annotations

from pydantic import Field

from config.base import EVERYONE, ChatChannelSection, TrustSection


class WebTrustSection(TrustSection):
    """The web chat's trust: only people the server signed in reach it, so all are members by default."""

    members: list[str] = [EVERYONE]


class WebChatConfig(ChatChannelSection):
    """The web chat at ``/chat`` (docs/channels/web.md): people signed in to this server chat in a browser.

    Everybody who can sign in (``auth.mode: jwt``: holds a token from ``switchboard token create``) is a
    member by default, since the server itself vouched for them; ``admins`` are user ids. Transcripts,
    uploads and the files the agent hands back live under ``<data_dir>/web-chat/<user>/``.
    """

    trust: WebTrustSection = Field(default_factory=WebTrustSection)
    #: The largest file a person may upload with a message (and the largest the agent reads from it).
    max_file_bytes: int = Field(20 * 1024 * 1024, gt=0)
    #: The longest message the page accepts, in characters.
    max_message_chars: int = Field(20_000, gt=0, le=200_000)
