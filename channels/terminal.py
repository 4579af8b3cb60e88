"""A terminal channel for ``switchboard chat``: try the bot with no platform account.

On a terminal it is a real line editor (prompt_toolkit: arrows, history, Ctrl-R, paste of any length) and
streams the reply as it grows. Without one (a pipe or file) it reads one message per line, prints each
final reply, and exits at end of input — so the bot can be scripted and tested.

Why a line editor and not ``input()``: a terminal in canonical mode cuts a line at 4,095 bytes (the kernel's
line buffer) and hands arrow keys to the program as escape codes; prompt_toolkit reads the terminal raw,
so neither happens.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any, TextIO

from channels.base import Channel, InboundSink
from channels.reply import ReplyTransport
from channels.types import InboundMessage, ReplyLimits, Sender

#: How the manager starts a reply that reports a failed turn (``⚠️ <what went wrong> (trace …)``).
FAILED_MARK = "⚠️"
PROMPT = "you> "
QUIT_COMMANDS = frozenset({"/quit", "/exit"})


class TerminalTransport(ReplyTransport):
    def __init__(self, channel: TerminalChannel, message: InboundMessage) -> None:
        self.channel = channel
        self.message = message
        self.text = ""
        self.printed = ""

    async def send(self, text: str, *, fallback: bool = False) -> str:
        self.text = text
        self._render(final=False)
        return self.message.platform_message_id

    async def edit(self, ref: str, text: str) -> None:
        self.text = text
        self._render(final=False)

    def _render(self, *, final: bool) -> None:
        if not self.channel.interactive:
            return
        out = self.channel.output
        if self.text.startswith(self.printed) and self.printed:
            out.write(self.text[len(self.printed) :])
        elif self.text != "…" or final:
            out.write(("\n" if self.printed else "") + self.text)
        else:
            return
        self.printed = self.text
        out.flush()

    async def finished(self) -> None:
        out = self.channel.output
        if self.channel.interactive:
            self._render(final=True)
            out.write("\n")
        else:
            out.write(self.text.rstrip("\n") + "\n")
        out.flush()
        self.channel.reply_done(self.message.platform_message_id, failed=self.text.startswith(FAILED_MARK))


class TerminalChannel(Channel):
    provider = "terminal"
    limits = ReplyLimits(text_limit=1_000_000, min_edit_interval=0.05)
    #: Commands the terminal handles itself; ``/help`` lists them after the bot's own.
    local_commands = (("quit", "leave the chat (also /exit, Ctrl-D)"),)

    def __init__(
        self, *, user: str = "local", input: TextIO | None = None, output: TextIO | None = None
    ) -> None:
        super().__init__()
        self.user = user
        self.input = input or sys.stdin
        self.output = output or sys.stdout
        self.interactive = self.input.isatty() and self.output.isatty()
        self.session = uuid.uuid4().hex[:8]
        self._waiting: dict[str, asyncio.Event] = {}
        self._counter = 0
        self._editor: Any = None
        self.replies = 0
        self.failed_replies = 0

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self.status.set("connected")

    async def stop(self) -> None:
        self.status.set("stopped")

    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        return TerminalTransport(self, message)

    @property
    def all_failed(self) -> bool:
        """True when at least one reply came back and every one was an error (exit status for scripts)."""
        return self.replies > 0 and self.failed_replies == self.replies

    def reply_done(self, message_id: str, *, failed: bool = False) -> None:
        self.replies += 1
        self.failed_replies += int(failed)
        event = self._waiting.get(message_id)
        if event is not None:
            event.set()

    async def _read(self) -> str | None:
        """The next message, or None at end of input (Ctrl-D, end of the pipe)."""
        if not self.interactive:
            line = await asyncio.to_thread(self.input.readline)
            return line.rstrip("\r\n") if line else None
        if self._editor is None:
            from prompt_toolkit import PromptSession
            from prompt_toolkit.history import InMemoryHistory

            self._editor = PromptSession(history=InMemoryHistory())
        try:
            return str(await self._editor.prompt_async(PROMPT))
        except EOFError:
            return None
        except KeyboardInterrupt:
            return ""  # Ctrl-C clears the line, as in a shell

    async def run(self) -> None:
        """Read messages until end of input; each waits for its reply before the next is read."""
        if self._sink is None:
            raise RuntimeError("channel not started")
        while True:
            line = await self._read()
            if line is None:
                return
            text = line.strip()
            if not text:
                continue
            if text in QUIT_COMMANDS:
                return
            self._counter += 1
            message_id = f"{self.session}-{self._counter}"
            done = self._waiting[message_id] = asyncio.Event()
            await self._sink(
                InboundMessage(
                    provider=self.provider,
                    workspace="",
                    chat=f"terminal-{self.user}",
                    sender=Sender(id=self.user, name=self.user),
                    text=text,
                    platform_message_id=message_id,
                    is_private=True,
                )
            )
            await done.wait()
            del self._waiting[message_id]
