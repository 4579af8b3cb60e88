"""``/memory`` shows what the assistant remembers about the sender's owner; ``/memory clear`` forgets it.

Both only work in a private chat (``InboundMessage.is_private``): in a group they answer with a pointer
to a private chat and post nothing about the person.
"""

from __future__ import annotations

from bot.commands.base import Command, CommandContext

MAX_SHOWN = 30
PRIVATE_ONLY = (
    "Ask me in a private chat: what I remember about you is private, so I don't show or change it in a "
    "group. Send /memory (or /memory clear) to me directly."
)


async def memory(ctx: CommandContext) -> None:
    service = ctx.memory
    if service is None:
        await ctx.reply("Memory is turned off on this bot.")
        return
    owner = ctx.identity.owner
    action = ctx.args.strip().lower()
    if not ctx.message.is_private:
        # Memory is private data: never list it (or confirm what was forgotten) where others can read.
        await ctx.reply(PRIVATE_ONLY)
        return
    if action == "clear":
        conv = await ctx.conversation()
        count = await service.clear(owner, {conv.thread_id})
        await ctx.reply(f"🧹 Forgot everything I remembered about you ({count} fact(s)).")
        return
    if action:
        await ctx.reply("Usage: /memory to see what I remember, /memory clear to forget it.")
        return
    facts = await service.store.facts(owner)
    summary = await service.store.summary(owner)
    if not facts and not summary:
        await ctx.reply("I don't remember anything about you yet.")
        return
    lines = ["🧠 What I remember about you:"]
    if summary:
        lines.append(f"Summary: {summary}")
    lines.extend(f"• {f.content} ({f.category}, {f.confidence:.0%})" for f in facts[:MAX_SHOWN])
    if len(facts) > MAX_SHOWN:
        lines.append(f"… and {len(facts) - MAX_SHOWN} more")
    lines.append("Send /memory clear to make me forget.")
    await ctx.reply("\n".join(lines))


COMMAND = Command(
    name="memory",
    usage="[clear]",
    help="show what I remember about you, or forget it",
    handler=memory,
    private=True,
)
