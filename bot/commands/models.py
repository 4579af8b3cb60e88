from __future__ import annotations

from bot.commands.base import Command, CommandContext


async def models(ctx: CommandContext) -> None:
    names = ctx.host.agent.model_names()
    conv = await ctx.conversation()
    current = ctx.host.model_for(conv)
    wanted = ctx.args.strip()
    if not wanted:
        listing = "\n".join(
            f"{'• ' if n == current else '  '}{n}{' (current)' if n == current else ''}" for n in names
        )
        await ctx.reply(f"Models:\n{listing}\nSwitch with /models NAME.")
        return
    if wanted not in names:
        await ctx.reply(f"Unknown model {wanted!r}. Available: {', '.join(names)}.")
        return
    await ctx.host.threads.set_model(conv.key, ctx.identity.owner, wanted)
    await ctx.reply(f"This conversation now uses {wanted}.")


COMMAND = Command(
    name="models", usage="[name]", help="list models, or switch this conversation to one", handler=models
)
