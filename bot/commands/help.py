from __future__ import annotations

from bot.commands.base import Command, CommandContext


async def show_help(ctx: CommandContext) -> None:
    lines = ["Commands:"]
    for command in ctx.host.listed_commands():
        usage = f" {command.usage}" if command.usage else ""
        lines.append(f"/{command.name}{usage} — {command.help}")
    # Commands a channel handles itself (the terminal's /quit) never reach the registry.
    channel = ctx.host.channels.get(ctx.message.provider)
    lines.extend(f"/{name} — {text}" for name, text in (channel.local_commands if channel else ()))
    skills = ctx.host.agent.skill_names()
    if skills:
        lines.append(
            "Skills: " + ", ".join(f"/{name}" for name in skills) + " (e.g. /" + skills[0] + " TASK)"
        )
    lines.append("Anything else is sent to the assistant.")
    await ctx.reply("\n".join(lines))


COMMAND = Command(name="help", help="list the commands", handler=show_help, guests=True)
