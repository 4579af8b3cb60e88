"""``/forget``: delete this chat's conversation for good — what the assistant was told and answered here,
and the files of its thread — not just start a new one.

``/new`` only moves the chat to a fresh thread (the old one goes once retention allows, see
bot/thread_retention.py); ``/forget`` erases it now. In a direct message its owner may; in a group only
an admin of the chat, since the thread holds everyone's messages. It asks once: ``/forget yes`` does it.
A running answer is stopped first by its owner with ``/stop``: erasing under it would race its writes.
Memory about the person (``/memory``) is theirs, not the chat's, and is not touched.
"""

from __future__ import annotations

from bot.commands.base import Command, CommandContext

ASK = (
    "This deletes this chat's conversation for good: everything I was told and answered here, and the "
    "files of this conversation. Send /forget yes to do it."
)


async def forget(ctx: CommandContext) -> None:
    eraser = ctx.host.eraser
    if eraser is None:
        await ctx.reply("Forgetting a chat is not available on this bot.")
        return
    conversation = await ctx.conversation()
    if ctx.message.is_private:
        allowed = conversation.owner == ctx.identity.owner or ctx.host.is_admin(ctx.message)
    else:
        allowed = ctx.host.is_admin(ctx.message)
    if not allowed:
        await ctx.reply("Only an admin of this chat can make me forget it (it holds everyone's messages).")
        return
    if ctx.args.strip().lower() != "yes":
        await ctx.reply(ASK)
        return
    if ctx.host.lane_state(conversation.thread_id) != "idle":
        await ctx.reply("I'm still answering here. Send /stop first, then /forget yes.")
        return
    old = conversation.thread_id
    await ctx.host.threads.start_new_thread(ctx.message.conversation_key, conversation.owner)
    await eraser.erase([old])
    await ctx.reply("🧹 Forgotten: this chat's conversation and its files are deleted. We start fresh.")


COMMAND = Command(
    name="forget",
    usage="[yes]",
    help="delete this chat's conversation and its files for good (asks first)",
    handler=forget,
)
