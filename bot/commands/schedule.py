"""``/schedule <when> <what>``, ``/schedule list``, ``/schedule cancel ID`` (docs/schedules.md)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from bot.commands.base import Command, CommandContext
from bot.schedule_spec import HELP, ScheduleError, parse_schedule
from bot.schedules import Schedule, TooManySchedules, conversation_label

USAGE = (
    "Usage: /schedule <when> <what> — e.g. /schedule every weekday 09:00 post the standup link. "
    "Also /schedule list and /schedule cancel ID. " + HELP
)


def _local(moment: float | None, tz: str) -> str:
    if moment is None:
        return "no further runs"
    return datetime.fromtimestamp(moment, ZoneInfo(tz)).strftime("%a %-d %b %H:%M")


def _line(schedule: Schedule) -> str:
    return f"{schedule.id} · {schedule.when} · next {_local(schedule.next_at, schedule.timezone)} · {schedule.what}"


async def schedule(ctx: CommandContext) -> None:
    book = ctx.schedules
    if book is None:
        await ctx.reply("Scheduled tasks are not available on this bot.")
        return
    args = ctx.args.strip()
    word, _, rest = args.partition(" ")
    label = conversation_label(ctx.message)
    if not args or word.lower() == "help":
        await ctx.reply(USAGE)
        return
    if word.lower() == "list":
        found = await book.store.for_conversation(label)
        if not found:
            await ctx.reply("No scheduled tasks in this chat. Add one with /schedule <when> <what>.")
            return
        await ctx.reply("⏰ Scheduled here:\n" + "\n".join(_line(s) for s in found))
        return
    if word.lower() == "cancel":
        schedule_id = rest.strip()
        if not schedule_id:
            await ctx.reply("Say which one: /schedule cancel ID (see /schedule list).")
            return
        mine = [s for s in await book.store.for_conversation(label) if s.id == schedule_id.lower()]
        if mine and mine[0].owner != ctx.identity.owner:
            await ctx.reply(f"Only the person who set up {mine[0].id} can cancel it.")
            return
        cancelled = bool(mine) and await book.store.cancel(label, schedule_id, book.clock())
        await ctx.reply(
            f"⏹ Cancelled {schedule_id}."
            if cancelled
            else f"There is no scheduled task {schedule_id} in this chat."
        )
        return
    try:
        spec = parse_schedule(args, now=book.clock(), tz=book.timezone)
    except ScheduleError as exc:
        await ctx.reply(str(exc))
        return
    if spec.what.lstrip().lower().startswith("/schedule"):
        await ctx.reply("A scheduled task cannot itself schedule tasks.")
        return
    try:
        created = await book.store.create(
            ctx.message, ctx.identity.owner, spec, tz=book.timezone, now=book.clock()
        )
    except TooManySchedules as exc:
        await ctx.reply(f"Not scheduled: {exc}.")
        return
    book.scheduler.poke()
    await ctx.reply(
        f"⏰ Scheduled {created.id}: {created.when} — next {_local(created.next_at, created.timezone)} "
        f"({created.timezone}). /schedule cancel {created.id} to stop it."
    )


COMMAND = Command(
    name="schedule",
    usage="<when> <what> | list | cancel ID",
    help="run something later or on a schedule in this chat (e.g. every weekday 09:00 …)",
    handler=schedule,
)
