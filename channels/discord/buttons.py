"""Buttons on Discord: a reply's actions as message components, and a press back as an InboundMessage.

Rendering: one action row (component type 1) per five buttons (type 2), ``custom_id`` = the action's
command, so a press carries everything it means and the bot keeps no table of buttons (a restart loses
nothing). The components are built with discord.py's own ``discord.ui.View``, *stopped before it is
sent*: discord.py serialises it like any view but, as it is finished, never registers it in its view
store, so presses are not dispatched to view callbacks (there are none) and nothing accumulates per
message (tests/channels/test_sdk_internals.py checks every send/edit path we use).
Discord's limits: 5 rows of 5, ``custom_id`` ≤ 100 characters, label ≤ 80. An action whose command does
not fit a ``custom_id`` gets no button; it can still be typed.

Presses: ``INTERACTION_CREATE`` type 3 (``MESSAGE_COMPONENT``) arrives through the same interaction path
as slash commands (:mod:`channels.discord.interactions`), which stores it and then acknowledges it with
type 6 (``DEFERRED_UPDATE_MESSAGE``: the pressed message stays as it is, the manager edits it later).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import discord

from channels.types import Action

log = logging.getLogger(__name__)

#: References of messages sent through an interaction (channels.discord.interactions returns them):
#: its original response as ``@original:<message id>`` (plain ``@original`` from older releases, or
#: when Discord did not say the id), and followups as ``i:<message id>``. The id is what lets a public
#: message be edited as an ordinary channel message once the interaction's token has expired.
ORIGINAL = "@original"
FOLLOWUP_PREFIX = "i:"


def original_ref(message_id: int | None) -> str:
    """The reference of an interaction's original response, with its message id when known."""
    return ORIGINAL if message_id is None else f"{ORIGINAL}:{message_id}"


def is_original(ref: str) -> bool:
    return ref == ORIGINAL or ref.startswith(f"{ORIGINAL}:")


def interaction_message_id(ref: str) -> int | None:
    """The message id inside an interaction message's reference (None: plain ``@original``)."""
    tail = ref.removeprefix(f"{ORIGINAL}:") if is_original(ref) else ref.removeprefix(FOLLOWUP_PREFIX)
    return int(tail) if tail.isdigit() else None


#: Discord's component limits (https://discord.com/developers/docs/components/reference).
CUSTOM_ID_MAX = 100
LABEL_MAX = 80
BUTTONS_PER_ROW = 5
ROWS_MAX = 5
#: Component type of a button in ``interaction.data["component_type"]``.
BUTTON_COMPONENT = 2

_STYLES = {
    "primary": discord.ButtonStyle.primary,  # 1, blurple
    "danger": discord.ButtonStyle.danger,  # 4, red
}


def action_view(actions: Sequence[Action]) -> discord.ui.View | None:
    """The components for ``actions`` as a render-only view; None when no button can be shown."""
    view = discord.ui.View(timeout=None)
    seen: set[str] = set()
    for action in actions:
        if not action.command or len(action.command) > CUSTOM_ID_MAX:
            log.warning("action %r does not fit a Discord custom_id; no button for it", action.label)
            continue
        if action.command in seen or len(seen) == BUTTONS_PER_ROW * ROWS_MAX:
            continue  # Discord refuses a custom_id twice in one message, and a 26th button
        label = action.label if len(action.label) <= LABEL_MAX else action.label[: LABEL_MAX - 1] + "…"
        style = _STYLES.get(action.style or "", discord.ButtonStyle.secondary)  # 2, grey
        row = len(seen) // BUTTONS_PER_ROW
        seen.add(action.command)
        view.add_item(
            discord.ui.Button(label=label or action.command, custom_id=action.command, style=style, row=row)
        )
    if not seen:
        return None
    view.stop()  # render only: a stopped view is serialised but never stored for dispatch (module doc)
    return view


def send_kwargs(actions: Sequence[Action]) -> dict[str, Any]:
    """Keyword arguments for a new message: ``view`` only when there are buttons to show."""
    view = action_view(actions)
    return {"view": view} if view is not None else {}


def pressed_ref(message: discord.Message) -> str:
    """The reference our transports returned for ``message`` when they sent it (docs/channels.md, "Buttons").

    An ordinary bot message is its id (:class:`~channels.discord.transport.DiscordTransport`); a
    message sent through an interaction is that interaction's ``@original:<id>`` or ``i:<id>`` followup
    (:class:`~channels.discord.interactions.InteractionTransport`), which Discord tells apart by the
    ``original_response_message_id`` it puts on followups only.
    """
    metadata = message.interaction_metadata
    if metadata is None:
        return str(message.id)
    if metadata.original_response_message_id is None:
        return original_ref(message.id)
    return f"{FOLLOWUP_PREFIX}{message.id}"
