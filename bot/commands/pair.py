"""``/pair CODE`` (or ``/pair approve CODE``), ``/pair deny CODE``, ``/pair list``, ``/pair remove ID``.

An admin of the channel lets a stranger in (bot/pairing.py, docs/security.md): the stranger's private
message got a pairing code; the admin sends it here, from any conversation with the bot on the same
platform. The stranger becomes a member, is told so in their private chat, and the message that asked
is answered. Who is waiting (names, ids) is only listed in a private chat: never to a group.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from bot.commands.base import Command, CommandContext
from bot.pairing import PairingRequest
from channels.errors import Backpressure

audit = logging.getLogger("switchboard.audit")

USAGE = "Usage: /pair CODE to approve a pairing request, /pair deny CODE, /pair list, /pair remove USER_ID."
WELCOME = "✅ An admin approved you: you're a member now and can talk to me. Now to your message:"
RESEND = "I'm too busy to take your earlier message right now: please send it again."


async def pair(ctx: CommandContext) -> None:
    host = ctx.host
    store = host.pairing
    if store is None:
        await ctx.reply("Pairing is not available on this bot.")
        return
    if not host.is_admin(ctx.message):
        await ctx.reply("Sorry, only an admin of this bot can approve pairing requests.")
        return
    words = ctx.args.split()
    verb = words[0].lower() if words else "list"
    if verb not in ("approve", "deny", "list", "remove"):
        words, verb = ["approve", *words], "approve"
    argument = words[1] if len(words) > 1 else ""
    provider, now = ctx.message.provider, time.time()
    if verb == "list":
        await _listing(ctx, provider, now)
        return
    if not argument:
        await ctx.reply(USAGE)
        return
    who = f"{provider}:{ctx.message.sender.id}"
    if verb == "remove":
        removed = await store.remove(provider, argument)
        if removed:
            audit.info("paired sender removed by %s", who, extra={"fields": {"by": who, "sender": argument}})
        await ctx.reply(
            f"Removed: {argument} is a guest again." if removed else f"{argument} was not paired here."
        )
        return
    if verb == "deny":
        denied = await store.deny(provider, argument, now)
        await ctx.reply("Pairing request denied." if denied else _unknown(argument))
        return
    approved = await store.approve(provider, argument, who, now)
    if approved is None:
        await ctx.reply(_unknown(argument))
        return
    audit.info(
        "pairing approved by %s",
        who,
        extra={"fields": {"by": who, "sender": f"{provider}:{approved.sender_id}"}},
    )
    named = f"{approved.sender_name} ({approved.sender_id})" if approved.sender_name else approved.sender_id
    await ctx.reply(f"✅ Paired: {named if ctx.message.is_private else 'that sender'} is a member now.")
    await _welcome(ctx, approved)


def _unknown(code: str) -> str:
    return f"There is no open pairing request {code.upper()} here (codes expire after an hour)."


async def _listing(ctx: CommandContext, provider: str, now: float) -> None:
    if not ctx.message.is_private:
        await ctx.reply("Send /pair list to me in a private chat: who is waiting is not for a group.")
        return
    assert ctx.host.pairing is not None
    waiting = await ctx.host.pairing.pending(provider, now)
    if not waiting:
        await ctx.reply("Nobody is waiting for pairing here.")
        return
    lines = [f"{r.code} · {r.sender_name or '?'} ({r.sender_id})" for r in waiting]
    await ctx.reply("Waiting for pairing (approve with /pair CODE):\n" + "\n".join(lines))


async def _welcome(ctx: CommandContext, request: PairingRequest) -> None:
    """Tell the new member in their own chat, and hand the message that asked to the bus again.

    Through the inbox like anything a person sends (durable, one instance runs it), under its own id
    (``paired:CODE``), so it is routed afresh — now from a member.
    """
    host = ctx.host
    message = replace(request.message, platform_message_id=f"paired:{request.code}")
    await host.send_notice(message, WELCOME)
    try:
        await host.publish(message)
    except Backpressure:
        await host.send_notice(message, RESEND)


COMMAND = Command(
    name="pair",
    usage="CODE | deny CODE | list | remove USER_ID",
    help="(admins) approve a stranger's pairing code, so they may talk to the bot",
    handler=pair,
)
