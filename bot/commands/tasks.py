"""``/tasks``: this chat's running and recent background jobs; ``/tasks ID`` one of them with its steps;
``/tasks stop ID`` stops one (what the ⏹ Stop button on a task card sends). docs/tasks.md."""

from __future__ import annotations

import time

from bot.commands.base import Command, CommandContext
from bot.tasks.card import KIND_LABELS, STATUS_LINES
from bot.tasks.goal_card import GOAL_KIND
from bot.tasks.store import TaskRow, conversation_label
from bot.turns import StopResult

USAGE = "Usage: /tasks (this chat's tasks), /tasks ID (one, with its steps), /tasks stop ID."
MAX_SHOWN_RESULT = 1500
NOT_YOURS = "Sorry, only the person who started this task (or an admin) can stop it."
GOAL_STOPPED = "stopped with ⏹ Stop"


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{int(seconds)}s ago"
    if seconds < 5400:
        return f"{int(seconds // 60)}m ago"
    if seconds < 129_600:
        return f"{int(seconds // 3600)}h ago"
    return f"{int(seconds // 86_400)}d ago"


def _line(row: TaskRow, now: float) -> str:
    status = STATUS_LINES.get(row.status, row.status)
    step = f" — {row.step}" if row.step and not row.final else ""
    title = " ".join(row.title.split())[:80]
    return f"{row.short} · {KIND_LABELS.get(row.kind, 'Task')}: {title} · {status}{step} · {_age(now - row.created_at)}"


def _detail(row: TaskRow, now: float) -> str:
    lines = [_line(row, now)]
    if row.steps:
        lines.append("Steps:")
        lines.extend(f"{n}. {step}" for n, step in enumerate(row.steps, 1))
    else:
        lines.append("Steps: none recorded.")
    if row.result is not None:
        result = row.result if len(row.result) <= MAX_SHOWN_RESULT else row.result[:MAX_SHOWN_RESULT] + "…"
        lines.append(f"Result:\n{result}")
    return "\n".join(lines)


async def tasks(ctx: CommandContext) -> None:
    desk = ctx.host.tasks
    if desk is None:
        await ctx.reply("Task cards are not available on this bot.")
        return
    label = conversation_label(ctx.message)
    word, _, rest = ctx.args.strip().partition(" ")
    now = time.time()
    if not word:
        rows = await desk.store.for_conversation(label)
        if not rows:
            await ctx.reply("No tasks in this chat yet.")
            return
        await ctx.reply(
            "Tasks in this chat (newest first, running ones on top):\n"
            + "\n".join(_line(r, now) for r in rows)
        )
        return
    if word.lower() == "help":
        await ctx.reply(USAGE)
        return
    if word.lower() == "stop":
        await _stop(ctx, label, rest.strip())
        return
    row = await desk.store.by_short(label, word)
    if row is None:
        await ctx.reply(f"There is no task {word!r} in this chat. /tasks lists them.")
        return
    await ctx.reply(_detail(row, now))


async def _stop(ctx: CommandContext, label: str, short: str) -> None:
    desk = ctx.host.tasks
    assert desk is not None
    row = await desk.store.by_short(label, short) if short else None
    if row is None:
        await ctx.reply(f"There is no task {short!r} in this chat. /tasks lists them." if short else USAGE)
        return
    if row.final:
        answer = f"Task {row.short} has already ended ({row.status})."
    elif row.kind == GOAL_KIND:
        answer = await _stop_goal(ctx, row)
    elif row.stop_token is not None:  # the card is a turn's reply: stop that turn, as its ⏹ would
        result = await ctx.host.stop_turn(ctx.message, row.thread_id, row.stop_token)
        answer = {
            StopResult.STOPPED: f"Stopping task {row.short}.",
            StopResult.NOT_YOURS: NOT_YOURS,
        }.get(result, f"Task {row.short} is not running right now.")
    else:
        if not _may_stop(ctx, row):
            answer = NOT_YOURS
        elif desk.request_stop(row.id):
            answer = f"Stopping task {row.short}."
        else:
            answer = f"Task {row.short} is not running right now."
    if ctx.message.pressed and answer.startswith("Stopping"):
        return  # a Stop button: the card itself shows "Stopped"
    await ctx.host.send_notice(ctx.message, answer, private=bool(ctx.message.pressed))
    ctx.replies.append(answer)


def _may_stop(ctx: CommandContext, row: TaskRow) -> bool:
    """The person whose job it is, or a channel admin."""
    asker = row.message.sender
    mine = asker.id == ctx.message.sender.id and row.message.provider == ctx.message.provider
    return mine or ctx.host.is_admin(ctx.message)


async def _stop_goal(ctx: CommandContext, row: TaskRow) -> str:
    """A goal's ⏹ Stop: the goal stops (no further step starts), its card says so, and the step running
    now is stopped as ``/stop`` would (its answer does not overwrite the card's end)."""
    desk, keeper = ctx.host.tasks, ctx.goals
    assert desk is not None
    if not _may_stop(ctx, row):
        return NOT_YOURS
    goal = await keeper.store.get(row.thread_id) if keeper is not None else None
    if keeper is not None and goal is not None and goal.active:
        await keeper.store.close(row.thread_id, "stopped", GOAL_STOPPED)
    card = await desk.goals.get(row.id)
    if card is not None:
        objective = goal.objective if goal is not None else row.title
        ended = f"🎯 Goal paused: {GOAL_STOPPED}. Send /goal {objective} to resume."
        # The card keeps the last answer a step delivered (the step stopped now delivers none).
        answer = await keeper.store.last_answer(row.thread_id, goal.created_at) if keeper and goal else None
        await card.close("stopped", f"{answer}\n\n{ended}" if answer else ended)
    if row.stop_token is not None:
        await ctx.host.stop_turn(ctx.message, row.thread_id, row.stop_token)
    return f"Stopping task {row.short}."


COMMAND = Command(
    name="tasks",
    usage="[ID | stop ID]",
    help="this chat's running and recent background tasks; /tasks ID shows one with its steps",
    handler=tasks,
)
