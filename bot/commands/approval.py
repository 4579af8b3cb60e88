"""``/approval [never|risky|always|default]``: this chat's own ``sandbox.approval``, set by an admin.

A team may want every command approved in a production chat, or none in a sandbox chat, without
changing the whole service. Only a channel admin may change it (an override to ``never`` lets risky
commands run unasked in that chat); anybody may ask what applies. Each change is an audit line.
"""

from __future__ import annotations

import logging

from bot.commands.base import Command, CommandContext
from bot.turns import APPROVAL_MODES, approval_mode

audit = logging.getLogger("switchboard.audit")

MEANING = {
    "never": "no command waits for approval",
    "risky": "risky commands (deletes, pushes, installs, sending data …) wait for approval",
    "always": "every command waits for approval",
}


async def approval(ctx: CommandContext) -> None:
    conv = await ctx.conversation()
    service_mode = ctx.host.settings.sandbox.approval
    own = approval_mode(conv.approval)
    wanted = ctx.args.strip().lower()
    if not wanted:
        mode = own or service_mode
        origin = "set for this chat" if own else "the bot's default"
        await ctx.reply(f"Approval here: {mode} ({origin}) — {MEANING[mode]}.")
        return
    if wanted not in (*APPROVAL_MODES, "default"):
        await ctx.reply("Usage: /approval [never|risky|always|default].")
        return
    if not ctx.host.is_admin(ctx.message):
        await ctx.reply("Sorry, only an admin of this bot can change approvals for a chat.")
        return
    new = None if wanted == "default" else wanted
    await ctx.host.threads.set_approval(conv.key, ctx.identity.owner, new)
    who = f"{ctx.message.provider}:{ctx.message.sender.id}"
    audit.info(
        "approval mode of a chat set to %s by %s",
        new or f"default ({service_mode})",
        who,
        extra={"fields": {"approval_mode": new or "default", "by": who}},
    )
    mode = approval_mode(new) or service_mode
    await ctx.reply(f"Approval here is now {mode} — {MEANING[mode]}.")


COMMAND = Command(
    name="approval",
    usage="[never|risky|always|default]",
    help="show this chat's approval mode, or (admins) change it",
    handler=approval,
)
