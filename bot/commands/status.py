from __future__ import annotations

from agent.usage import UsageStore
from bot.commands.base import Command, CommandContext


async def show_status(ctx: CommandContext) -> None:
    conv = await ctx.conversation()
    model = ctx.host.model_for(conv)
    state = ctx.host.lane_state(conv.thread_id)
    lines = [
        f"Thread: {conv.thread_id}",
        f"Model: {model}",
        f"State: {state}",
    ]
    usage_store = getattr(ctx.host.agent, "usage", None)
    if isinstance(usage_store, UsageStore):
        usage = await usage_store.get(conv.thread_id)
        lines.append(usage.describe() if usage is not None else "Tokens: none used yet in this thread")
    for provider in ctx.host.status_providers:
        extra = await provider(conv)
        if extra:
            lines.append(extra)
    await ctx.reply("\n".join(lines))


COMMAND = Command(
    name="status",
    help="show this conversation's thread, model, run state, token usage and goal",
    handler=show_status,
    guests=True,
    private=True,
)
