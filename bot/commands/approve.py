"""``/approve ID [session]`` and ``/deny ID``: answer a risky command's approval request (bot/approvals.py).

``session`` also lets the same command patterns run without asking in this conversation until ``/new``.
"""

from __future__ import annotations

from bot.commands.base import Command, CommandContext


async def _decide(ctx: CommandContext, *, approve: bool) -> None:
    desk = ctx.host.approvals
    if desk is None:
        await ctx.reply("Commands need no approval on this bot.")
        return
    words = ctx.args.split()
    session = approve and len(words) == 2 and words[1].lower() == "session"
    if not words or len(words) > (2 if approve else 1) or (len(words) == 2 and not session):
        await ctx.reply(
            "Usage: /approve ID [session] (the id in the approval request; session also allows the same "
            "command here until /new)."
            if approve
            else "Usage: /deny ID (the id in the approval request)."
        )
        return
    if ctx.message.trust == "guest":
        # Decided at the edge (a GitHub author who is not a collaborator): never an approver, not even
        # of a command in a turn they started.
        await ctx.reply("Sorry, guests can't decide approval requests here; a collaborator or an admin can.")
        return
    channel = ctx.host.channels.get(ctx.message.provider)
    verdict = await desk.decide(
        words[0],
        ctx.message,
        approve=approve,
        admin=ctx.host.is_admin(ctx.message),
        approver=channel is not None and channel.is_approver(ctx.message),
        session=session,
    )
    if verdict.ok and verdict.edited and ctx.message.pressed:
        return  # a button press: the request's own message now says what happened
    if not verdict.ok and ctx.message.pressed:
        # Somebody else's press, or a stale button: only the presser needs to hear why.
        await ctx.host.send_notice(ctx.message, verdict.text, private=True)
        return
    await ctx.reply(verdict.text)


async def approve(ctx: CommandContext) -> None:
    await _decide(ctx, approve=True)


async def deny(ctx: CommandContext) -> None:
    await _decide(ctx, approve=False)


COMMAND = Command(
    name="approve",
    usage="ID [session]",
    help="run a command the bot asked approval for (session: and allow it here until /new)",
    handler=approve,
)
