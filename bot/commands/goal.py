"""``/goal OBJECTIVE`` sets a goal and starts on it; ``/goal`` shows it; ``/goal clear`` clears it."""

from __future__ import annotations

import json

from bot.commands.base import Command, CommandContext

MAX_OBJECTIVE = 2000


async def goal(ctx: CommandContext) -> None:
    from agent.goals import resume_prompt, start_prompt  # LangChain: loaded by the agent's start

    keeper = ctx.goals
    if keeper is None:
        await ctx.reply("Goals are not available on this bot.")
        return
    conv = await ctx.conversation()
    objective = ctx.args.strip()
    current = await keeper.store.get(conv.thread_id)
    if not objective:
        if current is None:
            await ctx.reply("No goal is set. Start one with /goal OBJECTIVE.")
        else:
            steps = await keeper.store.unfinished(conv.thread_id)
            await ctx.reply(keeper.describe(current, keeper.max_continuations, steps[-1] if steps else None))
        return
    if objective.lower() == "clear":
        cleared = await keeper.store.clear(conv.thread_id)
        await ctx.reply("🎯 Goal cleared." if cleared else "There was no goal to clear.")
        return
    if len(objective) > MAX_OBJECTIVE:
        await ctx.reply(f"That goal is too long ({len(objective)} characters; limit {MAX_OBJECTIVE}).")
        return
    origin = json.dumps(ctx.message.to_json(), ensure_ascii=False)  # where later steps answer
    if (
        current is not None
        and current.objective == objective
        and current.status not in ("active", "satisfied")
    ):
        # "Send /goal X to resume": the same goal picks up where it paused, with the steps it has used.
        resumed = await keeper.store.resume(conv.thread_id)
        if resumed is not None:
            await ctx.reply(
                f"🎯 Goal resumed: {objective} ({resumed.continuations}/{keeper.max_continuations} "
                "continuations used)"
            )
            await keeper.store.note_start(resumed, resume_prompt(objective), origin)
            await ctx.start_turn(resume_prompt(objective))
            return
    new_goal = await keeper.store.set(conv.thread_id, ctx.identity.owner, objective)
    await keeper.store.note_start(new_goal, start_prompt(objective), origin)
    await ctx.reply(f"🎯 Goal set: {objective}")
    await ctx.start_turn(start_prompt(objective))


COMMAND = Command(
    name="goal",
    usage="[objective|clear]",
    help="set a goal I keep working toward, show it, or clear it",
    handler=goal,
)
