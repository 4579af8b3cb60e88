"""``/goal OBJECTIVE`` sets a goal and starts on it; ``/goal`` shows it; ``/goal clear`` clears it."""

from __future__ import annotations

from agent.goals import start_prompt
from bot.commands.base import Command, CommandContext

MAX_OBJECTIVE = 2000


async def goal(ctx: CommandContext) -> None:
    keeper = ctx.goals
    if keeper is None:
        await ctx.reply("Goals are not available on this bot.")
        return
    conv = await ctx.conversation()
    objective = ctx.args.strip()
    if not objective:
        current = await keeper.store.get(conv.thread_id)
        if current is None:
            await ctx.reply("No goal is set. Start one with /goal OBJECTIVE.")
        else:
            await ctx.reply(keeper.describe(current, keeper.max_continuations))
        return
    if objective.lower() == "clear":
        cleared = await keeper.store.clear(conv.thread_id)
        await ctx.reply("🎯 Goal cleared." if cleared else "There was no goal to clear.")
        return
    if len(objective) > MAX_OBJECTIVE:
        await ctx.reply(f"That goal is too long ({len(objective)} characters; limit {MAX_OBJECTIVE}).")
        return
    await keeper.store.set(conv.thread_id, ctx.identity.owner, objective)
    await ctx.reply(f"🎯 Goal set: {objective}")
    await ctx.start_turn(start_prompt(objective))


COMMAND = Command(
    name="goal",
    usage="[objective|clear]",
    help="set a goal I keep working toward, show it, or clear it",
    handler=goal,
)
