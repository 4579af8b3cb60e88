"""``/stop``: stop the reply in progress. A Stop button sends ``/stop TOKEN`` for its own turn."""

from __future__ import annotations

from bot.commands.base import Command, CommandContext
from bot.turns import StopResult

ANSWERS = {
    StopResult.STOPPED: "Stopping the current reply.",
    StopResult.NOTHING: "Nothing is running right now.",
    StopResult.FINISHED: "That reply has already finished.",
}


async def stop(ctx: CommandContext) -> None:
    conv = await ctx.conversation()
    token = ctx.args.split()[0] if ctx.args else None
    result = await ctx.host.stop_turn(ctx.message, conv.thread_id, token)
    if result is StopResult.NOT_YOURS:
        await ctx.host.send_notice(
            ctx.message,
            "Sorry, only the person who asked (or an admin) can stop this reply.",
            private=True,
        )
        ctx.replies.append("not yours")
        return
    if ctx.message.pressed:
        # A Stop button: the answer itself ends with "⏹ Stopped."; only a stale button needs a word,
        # and only to the person who pressed it.
        if result is not StopResult.STOPPED:
            await ctx.host.send_notice(ctx.message, ANSWERS[result], private=True)
        return
    await ctx.reply(ANSWERS[result])


COMMAND = Command(name="stop", help="stop the reply in progress", handler=stop, guests=True)
