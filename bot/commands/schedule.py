"""``/schedule <when> <what>``, ``/schedule list``, ``/schedule cancel ID`` (docs/schedules.md)."""

from __future__ import annotations

from bot.commands.base import Command, CommandContext
from bot.schedule_desk import ScheduleDesk
from bot.schedule_spec import HELP

USAGE = (
    "Usage: /schedule <when> <what> — e.g. /schedule every weekday 09:00 post the standup link. "
    "Also /schedule list and /schedule cancel ID. " + HELP
)


async def schedule(ctx: CommandContext) -> None:
    if ctx.schedules is None:
        await ctx.reply("Scheduled tasks are not available on this bot.")
        return
    desk = ScheduleDesk(ctx.schedules, ctx.message, ctx.identity.owner, ctx.trust)
    args = ctx.args.strip()
    word, _, rest = args.partition(" ")
    if not args or word.lower() == "help":
        await ctx.reply(USAGE)
    elif word.lower() == "list":
        await ctx.reply(await desk.listing())
    elif word.lower() == "cancel":
        await ctx.reply(await desk.cancel(rest))
    else:
        await ctx.reply(await desk.add(args))


COMMAND = Command(
    name="schedule",
    usage="<when> <what> | list | cancel ID",
    help="run something later or on a schedule in this chat (e.g. every weekday 09:00 …)",
    handler=schedule,
)
