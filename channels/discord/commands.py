"""The service's commands as Discord application (slash) commands: one bulk overwrite, only on change.

Discord limits command *creation* (200 a day per guild; a bulk overwrite counts each new command), so the
channel first reads what is registered (``GET /applications/{id}/commands``, not a creation) and sends
``PUT /applications/{id}/commands`` only when the names, descriptions or options differ. A refusal is
logged, never fatal: the same commands still work typed out as text.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Sequence
from typing import Any

import discord

from channels.discord.transport import map_discord_error
from channels.types import ChatCommand

log = logging.getLogger(__name__)

#: Discord's limits for a CHAT_INPUT command (application-commands docs, "Application Command Naming").
NAME_LIMIT = 32
DESCRIPTION_LIMIT = 100
MAX_GLOBAL_COMMANDS = 100
#: Application command type CHAT_INPUT, option type STRING.
CHAT_INPUT, STRING_OPTION = 1, 3
#: The one optional option every command gets: what would follow the name when typed as text.
ARGS_OPTION = "args"
ARGS_DESCRIPTION = "what follows the command, as you would type it after /name"


def valid_name(name: str) -> bool:
    """``^[-_\\p{L}\\p{N}]{1,32}$`` with lowercase letters only, as Discord requires for slash commands."""
    if not 1 <= len(name) <= NAME_LIMIT or name != name.lower():
        return False
    return all(ch in "-_" or unicodedata.category(ch)[0] in "LN" for ch in name)


def command_payload(commands: Sequence[ChatCommand]) -> list[dict[str, Any]]:
    """The bulk-overwrite body for ``commands``; names Discord would refuse are left out (and logged)."""
    payload: list[dict[str, Any]] = []
    for command in commands:
        name = command.name.lower()
        if not valid_name(name):
            log.info("/%s cannot be a Discord slash command (1-32 lowercase letters, digits, - or _)", name)
            continue
        description = " ".join(command.description.split()) or name
        if len(description) > DESCRIPTION_LIMIT:
            description = description[: DESCRIPTION_LIMIT - 1] + "…"
        payload.append(
            {
                "type": CHAT_INPUT,
                "name": name,
                "description": description,
                "options": [
                    {
                        "type": STRING_OPTION,
                        "name": ARGS_OPTION,
                        "description": ARGS_DESCRIPTION,
                        "required": False,
                    }
                ],
            }
        )
    return payload[:MAX_GLOBAL_COMMANDS]


def _shape(command: dict[str, Any]) -> tuple[Any, ...]:
    """What we set on a command, in a form where Discord's extra fields and defaults do not count."""
    options = tuple(
        (o.get("type"), o.get("name"), o.get("description"), bool(o.get("required", False)))
        for o in command.get("options") or []
    )
    return (command.get("type", CHAT_INPUT), command.get("name"), command.get("description"), options)


def needs_overwrite(registered: Sequence[dict[str, Any]], wanted: Sequence[dict[str, Any]]) -> bool:
    return sorted(map(_shape, registered)) != sorted(map(_shape, wanted))


async def sync_commands(client: discord.Client, commands: Sequence[ChatCommand]) -> bool:
    """Make the application's global commands equal to ``commands``; True when an overwrite was sent."""
    wanted = command_payload(commands)
    application_id = client.application_id
    if not wanted or application_id is None:
        return False
    try:
        registered = await client.http.get_global_commands(application_id)
        if not needs_overwrite(registered, wanted):  # type: ignore[arg-type]
            log.debug("Discord slash commands are up to date (%d)", len(wanted))
            return False
        await client.http.bulk_upsert_global_commands(application_id, wanted)
    except Exception as exc:
        log.warning("Discord refused the slash commands (they still work typed): %s", map_discord_error(exc))
        return False
    log.info("registered %d Discord slash command(s)", len(wanted))
    return True
