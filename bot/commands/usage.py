"""``/usage``: what your turns cost today and this month; admins also see this chat's and the top
spenders (those only in a direct message: other people's spending never goes to a group)."""

from __future__ import annotations

from bot.commands.base import Command, CommandContext
from bot.spend.report import scope_summary, top_spenders
from bot.spend.scope import chat_of


async def show_usage(ctx: CommandContext) -> None:
    keeper = ctx.host.spend
    if keeper is None:
        await ctx.reply("Usage is not recorded on this service.")
        return
    ledger, gate, currency = keeper.ledger, keeper.gate, keeper.currency
    lines = ["Your usage:", *await scope_summary(ledger, gate, "owner", ctx.identity.owner, currency)]
    if ctx.host.is_admin(ctx.message):
        lines += [
            "",
            "This chat:",
            *await scope_summary(ledger, gate, "chat", chat_of(ctx.message), currency),
        ]
        if ctx.message.is_private:
            top = await top_spenders(ledger, currency)
            lines += ["", "Top spenders this month:", *(top or ["nobody has spent anything yet"])]
        else:
            lines += ["", "Top spenders: ask me for /usage in a direct message (spending is private)."]
    await ctx.reply("\n".join(lines))


COMMAND = Command(
    name="usage",
    help="what your turns cost today and this month (admins: this chat's and the top spenders)",
    handler=show_usage,
    private=True,
)
