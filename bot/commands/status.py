from __future__ import annotations

from bot.commands.base import Command, CommandContext


async def show_status(ctx: CommandContext) -> None:
    conv = await ctx.conversation()
    model = ctx.manager.model_for(conv)
    state = ctx.manager.lane_state(conv.thread_id)
    lines = [
        f"Thread: {conv.thread_id}",
        f"Model: {model}",
        f"State: {state}",
    ]
    for provider in ctx.manager.status_providers:
        extra = await provider(conv)
        if extra:
            lines.append(extra)
    await ctx.reply("\n".join(lines))


COMMAND = Command(
    name="status", help="show this conversation's thread, model, run state and goal", handler=show_status
)
