"""``/tools``: what the assistant can use here — its tools, MCP servers and skills."""

from __future__ import annotations

from bot.commands.base import Command, CommandContext


async def show_tools(ctx: CommandContext) -> None:
    agent = ctx.host.agent
    lines = ["Tools I can use:"]
    lines.extend(f"• {name} — {text}" for name, text in agent.tool_descriptions())
    servers = agent.mcp_status()
    if servers:
        lines.append("MCP servers: " + "; ".join(f"{name}: {state}" for name, state in servers.items()))
    skills = agent.skill_names()
    if skills:
        lines.append("Skills (send /name to use one): " + ", ".join(f"/{s}" for s in skills))
    await ctx.reply("\n".join(lines))


COMMAND = Command(name="tools", help="list the tools, MCP servers and skills I can use", handler=show_tools)
