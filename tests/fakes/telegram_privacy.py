"""Telegram's privacy mode for the fake: which group messages a bot receives.

From core.telegram.org/bots/features#privacy-mode: a bot in a group with privacy mode on (the default)
receives only

* commands explicitly meant for it (``/command@this_bot``),
* general commands (``/start``) if it was the last bot to send a message to the group,
* inline messages sent via the bot (the fake has none),
* replies to any messages implicitly or explicitly meant for it (its own messages, and messages that
  were delivered to it because they were meant for it),

plus, as BotFather's ``/setprivacy`` says, messages that mention it by username; and, regardless of
privacy mode, all service messages and everything in private chats. A bot that is an admin of the group,
or whose privacy mode is off, receives every message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

GROUP_TYPES = frozenset({"group", "supergroup"})
_COMMAND = re.compile(r"/[A-Za-z0-9_]+(?:@([A-Za-z0-9_]+))?")


@dataclass
class PrivacyMode:
    """The bot's privacy setting and what the rules need to remember per group."""

    bot_id: int
    bot_username: str
    #: BotFather's ``/setprivacy``: on by default.
    enabled: bool = True
    #: Groups where the bot is an admin (it receives everything there).
    admin_in: set[int] = field(default_factory=set)
    #: Per group, the id of the bot that sent the last bot message.
    last_bot: dict[int, int] = field(default_factory=dict)
    #: (chat, message id) of group messages delivered because they were meant for the bot.
    meant: set[tuple[int, int]] = field(default_factory=set)

    def bot_sent(self, chat_id: int, bot_id: int) -> None:
        """A bot (this one or another) sent a message to the chat."""
        self.last_bot[chat_id] = bot_id

    def delivers(self, message: dict[str, Any]) -> bool:
        """Whether Telegram hands ``message`` (a user's, just sent) to this bot."""
        chat = message["chat"]
        if chat["type"] not in GROUP_TYPES:
            return True
        chat_id = int(chat["id"])
        meant = self._meant_for_bot(chat_id, message)
        if meant:
            self.meant.add((chat_id, int(message["message_id"])))
        return meant or not self.enabled or chat_id in self.admin_in

    def _meant_for_bot(self, chat_id: int, message: dict[str, Any]) -> bool:
        text = str(message.get("text") or message.get("caption") or "")
        entities = message.get("entities") or message.get("caption_entities") or []
        if any(e["type"] == "bot_command" and e["offset"] == 0 for e in entities):
            command = _COMMAND.match(text)
            addressee = command.group(1) if command else None
            if addressee is not None:
                return addressee.lower() == self.bot_username.lower()
            return self.last_bot.get(chat_id) == self.bot_id
        mention = f"@{self.bot_username}".lower()
        if any(e["type"] == "mention" and _part(text, e).lower() == mention for e in entities):
            return True
        original = message.get("reply_to_message")
        if original is None:
            return False
        from_bot = (original.get("from") or {}).get("id") == self.bot_id
        return from_bot or (chat_id, int(original["message_id"])) in self.meant


def _part(text: str, entity: dict[str, Any]) -> str:
    """The text an entity covers (its offset and length count UTF-16 code units)."""
    encoded = text.encode("utf-16-le")
    start, length = entity["offset"] * 2, entity["length"] * 2
    return encoded[start : start + length].decode("utf-16-le")
