"""``/deny ID``: refuse a risky command's approval request (see bot/commands/approve.py)."""

from __future__ import annotations

from bot.commands.approve import deny
from bot.commands.base import Command

COMMAND = Command(name="deny", usage="ID", help="refuse a command the bot asked approval for", handler=deny)
