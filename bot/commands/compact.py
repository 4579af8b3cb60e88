"""``/compact``: fold this thread's older turns into its running summary now.

The runtime does this by itself when a thread outgrows the model's context; the command is for a user who
wants a lighter, faster thread (or who was told the conversation is too long) without losing it all as
``/new`` would. It never runs beside a turn of the same thread, which could be writing the history.
"""

from __future__ import annotations

import logging

from agent.errors import describe_error
from bot.commands.base import Command, CommandContext

log = logging.getLogger(__name__)


async def compact(ctx: CommandContext) -> None:
    from agent.runtime import ThreadChanged  # LangGraph: loaded by the agent's start, not with the commands

    runtime = ctx.host.agent
    compact_thread = getattr(runtime, "compact", None)
    if compact_thread is None:
        await ctx.reply("Compacting is not available on this bot.")
        return
    conv = await ctx.conversation()
    if ctx.host.lane_state(conv.thread_id) != "idle":
        await ctx.reply("I'm still answering in this conversation. Send /compact again when I'm done.")
        return
    try:
        result = await compact_thread(conv.thread_id, ctx.host.model_for(conv))
    except ThreadChanged:
        await ctx.reply("This conversation moved on while I was compacting it. Send /compact again.")
        return
    except Exception as exc:
        log.warning("compacting thread %s failed: %s", conv.thread_id[:8], type(exc).__name__)
        await ctx.reply(f"⚠️ I couldn't compact this conversation: {describe_error(exc)}")
        return
    if not result.summarised:
        await ctx.reply("Nothing to compact yet: this conversation is already short.")
        return
    await ctx.reply(
        f"🗜 Compacted: {result.summarised} earlier message(s) are now a summary "
        f"(about {result.tokens_before} → {result.tokens_after} tokens)."
    )


COMMAND = Command(
    name="compact",
    help="summarise the older part of this conversation to keep it short",
    handler=compact,
)
