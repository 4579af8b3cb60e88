"""``/memory`` shows what the assistant remembers about the sender's owner; ``/memory clear`` forgets it."""

from __future__ import annotations

from bot.commands.base import Command, CommandContext

MAX_SHOWN = 30


async def memory(ctx: CommandContext) -> None:
    service = ctx.memory
    if service is None:
        await ctx.reply("Memory is turned off on this bot.")
        return
    owner = ctx.identity.owner
    action = ctx.args.strip().lower()
    if action == "clear":
        service.forget_pending(owner)
        count = await service.store.clear(owner)
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
)
