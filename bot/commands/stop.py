from __future__ import annotations

from bot.commands.base import Command, CommandContext


async def stop(ctx: CommandContext) -> None:
    conv = await ctx.conversation()
    if await ctx.manager.stop_turn(ctx.message, conv.thread_id):
        await ctx.reply("Stopping the current reply.")
    else:
        await ctx.reply("Nothing is running right now.")


COMMAND = Command(name="stop", help="stop the reply in progress", handler=stop)
