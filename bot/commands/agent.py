"""``/agent [NAME]``: which named agent answers here and why; an admin may switch the chat's agent.

Why a command: with several agents bound to different places, "who am I talking to, and why this one?"
must be answerable in the chat itself. Switching is for a chat admin and only to an agent the config
marks ``switchable`` (an operator decides which personas a chat may pick); it applies to this
conversation's thread and to new threads in the chat. Each switch is an audit line.
"""

from __future__ import annotations

import logging

from bot.commands.base import Command, CommandContext

audit = logging.getLogger("switchboard.audit")


def room_line(ctx: CommandContext, depth: int) -> str:
    """What the agent's room window holds in this group: with Telegram's privacy mode on, only the
    messages addressed to the bot reach it, so the window is not what the config promises."""
    line = f"Room window: the last {depth} messages of this group before each question."
    channel = ctx.host.channels.get(ctx.message.provider)
    if channel is not None and channel.reads_all_group_messages is False:
        line += (
            " But Telegram's privacy mode is on for this bot, so it holds only messages addressed to me"
            " (unless I am an admin of this group). An operator turns it off in @BotFather (/setprivacy)."
        )
    return line


async def agent(ctx: CommandContext) -> None:
    directory = ctx.host.agents
    if directory is None:
        await ctx.reply("Only the built-in agent is configured here (no agents in the config).")
        return
    conv = await ctx.conversation()
    wanted = ctx.args.strip().lower()
    switchable = directory.switchable()
    if not wanted:
        choice = await directory.current(ctx.message, conv)
        lines = [f"Agent here: {choice.name}", f"Why: {choice.why}."]
        if choice.agent is not None and choice.agent.model is not None:
            lines.append(f"Its model: {choice.agent.model}")
        if choice.agent is not None and choice.agent.ambient and not ctx.message.is_private:
            lines.append(room_line(ctx, choice.agent.ambient))
        if switchable:
            lines.append(f"An admin can switch with /agent NAME: {', '.join(switchable)}.")
        await ctx.reply("\n".join(lines))
        return
    if not ctx.host.is_admin(ctx.message):
        await ctx.reply("Sorry, only an admin of this bot can switch the agent of a chat.")
        return
    if wanted not in switchable:
        offered = ", ".join(switchable) or "none (no agent is switchable: true)"
        await ctx.reply(f"Can't switch to {wanted!r}. Agents you can switch to: {offered}.")
        return
    await directory.switch(ctx.message, conv, wanted)
    who = f"{ctx.message.provider}:{ctx.message.sender.id}"
    audit.info(
        "agent of a chat switched to %s by %s", wanted, who, extra={"fields": {"agent": wanted, "by": who}}
    )
    await ctx.reply(f"This chat now talks to {wanted} (this thread and new threads here).")


COMMAND = Command(
    name="agent",
    usage="[name]",
    help="show which agent answers here and why, or (admins) switch to another",
    handler=agent,
    guests=True,
)
