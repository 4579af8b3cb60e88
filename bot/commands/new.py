from __future__ import annotations

from bot.commands.base import Command, CommandContext


async def new_thread(ctx: CommandContext) -> None:
    conv = await ctx.host.threads.start_new_thread(ctx.message.conversation_key, ctx.identity.owner)
    await ctx.reply(
        f"Started a new conversation (thread {conv.thread_id[:8]}). Earlier messages are forgotten."
    )


COMMAND = Command(
    name="new",
    help="start a fresh conversation (the assistant forgets this chat's history)",
    handler=new_thread,
    guests=True,
)
