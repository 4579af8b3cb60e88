"""Who owns a web chat message: the person signed in, by the user id the server itself vouched for.

A web message's workspace is the signed-in user id (channels/web/channel.py), so its owner is that user,
bound: their files, memory and threads are the same ones their connected chat accounts reach.
"""

from __future__ import annotations

from bot.identity import Identity
from channels.types import InboundMessage
from channels.web.channel import WebChannel


class WebIdentity:
    """An :class:`~bot.identity.IdentitySource` for the web chat; passes on every other platform."""

    async def resolve(self, message: InboundMessage) -> Identity | None:
        if message.provider != WebChannel.provider:
            return None
        return Identity(owner=message.workspace, bound=True)
