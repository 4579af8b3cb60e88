"""Chat commands: one module each, discovered at start-up."""

from __future__ import annotations

import importlib
import pkgutil

from bot.commands.base import Command, CommandContext, CommandHost, ParsedCommand, parse_command


class CommandRegistry:
    def __init__(self, commands: list[Command]) -> None:
        self._by_name: dict[str, Command] = {}
        self.commands = sorted(commands, key=lambda c: c.name)
        for command in self.commands:
            for name in (command.name, *command.aliases):
                if name in self._by_name:
                    raise ValueError(f"two commands claim /{name}")
                self._by_name[name] = command

    def get(self, name: str) -> Command | None:
        return self._by_name.get(name)

    @classmethod
    def discover(cls) -> CommandRegistry:
        found = []
        for info in pkgutil.iter_modules(__path__):
            if info.name == "base":
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            command = getattr(module, "COMMAND", None)
            if isinstance(command, Command):
                found.append(command)
        return cls(found)


__all__ = ["Command", "CommandContext", "CommandHost", "CommandRegistry", "ParsedCommand", "parse_command"]
