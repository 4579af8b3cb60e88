"""A terminal channel for ``switchboard chat``: try the bot with no platform account.

On a terminal it is a real line editor (prompt_toolkit: arrows, history, Ctrl-R, paste of any length) and
streams the reply as it grows. Without one (a pipe or file) it reads one message per line, prints each
final reply, and exits at end of input — so the bot can be scripted and tested.

Why a line editor and not ``input()``: a terminal in canonical mode cuts a line at 4,095 bytes (the kernel's
line buffer) and hands arrow keys to the program as escape codes; prompt_toolkit reads the terminal raw,
so neither happens.

While a reply streams, the terminal still listens: ``/stop`` + Enter or Ctrl-C stops that reply (the same
``/stop`` a chat platform sends). Other lines typed meanwhile are sent after the reply, in order, as if
typed at the prompt; an unfinished one starts the next prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import tty
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

from channels.base import Channel, InboundSink
from channels.reply import ReplyTransport
from channels.types import Action, InboundMessage, ReplyLimits, Sender

#: How the manager starts a reply that reports a failed turn (``⚠️ <what went wrong> (trace …)``).
FAILED_MARK = "⚠️"
PROMPT = "you> "
QUIT_COMMANDS = frozenset({"/quit", "/exit"})
STOP_COMMAND = "/stop"
ERASE = frozenset({"\x7f", "\b"})
CTRL_C = "\x03"


class TerminalTransport(ReplyTransport):
    def __init__(self, channel: TerminalChannel, message: InboundMessage) -> None:
        self.channel = channel
        self.message = message
        self.text = ""
        self.printed = ""

    async def send(self, text: str, *, fallback: bool = False, actions: Sequence[Action] = ()) -> str:
        self.text = text
        self._render(final=False)
        return self.message.platform_message_id

    async def edit(self, ref: str, text: str, *, actions: Sequence[Action] = ()) -> None:
        self.text = text
        self._render(final=False)

    def _render(self, *, final: bool) -> None:
        if not self.channel.interactive:
            return
        out = self.channel.output
        if self.text.startswith(self.printed) and self.printed:
            out.write(self.text[len(self.printed) :])
        elif self.text != "…" or final:
            out.write(("\n" if self.printed or self.channel.line_open else "") + self.text)
        else:
            return
        self.printed = self.text
        self.channel.line_open = not self.text.endswith("\n")
        out.flush()

    async def finished(self) -> None:
        out = self.channel.output
        if self.channel.interactive:
            self._render(final=True)
            out.write("\n")
            self.channel.line_open = False
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
        #: The cursor is after text on its line (a reply still streaming): the next reply starts below.
        self.line_open = False
        #: Typed while a reply streamed: whole lines are sent after it, in order, as if typed at the
        #: prompt; an unfinished line starts the next prompt.
        self._typed_lines: list[str] = []
        self._typeahead = ""
        self.replies = 0
        self.failed_replies = 0

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self.status.set("connected")

    async def stop(self) -> None:
        self.status.set("stopped")

    def is_admin(self, message: InboundMessage) -> bool:
        """Whoever types at ``switchboard chat`` runs the service: the operator, an admin."""
        return True

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
        if self._typed_lines:
            typed_line = self._typed_lines.pop(0)
            self.output.write(f"{PROMPT}{typed_line}\n")  # not echoed while it was typed
            self.output.flush()
            return typed_line
        if self._editor is None:
            from prompt_toolkit import PromptSession
            from prompt_toolkit.history import InMemoryHistory

            self._editor = PromptSession(history=InMemoryHistory())
        try:
            typed, self._typeahead = self._typeahead, ""
            return str(await self._editor.prompt_async(PROMPT, default=typed))
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
            message_id = self._next_id()
            done = self._waiting[message_id] = asyncio.Event()  # before sending: a reply can be instant
            await self._send(text, message_id)
            if self.interactive:
                await self._wait_listening(done)
            else:
                await done.wait()
            del self._waiting[message_id]

    def _next_id(self) -> str:
        self._counter += 1
        return f"{self.session}-{self._counter}"

    async def _send(self, text: str, message_id: str) -> None:
        assert self._sink is not None
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

    async def _wait_listening(self, done: asyncio.Event) -> None:
        """Wait for the reply while reading keys: ``/stop`` + Enter or Ctrl-C sends ``/stop``.

        The terminal is in cbreak mode meanwhile (keys arrive one by one, not echoed, so the streamed
        text is not interleaved with typing) with Ctrl-C read as a key; a SIGINT from elsewhere (kill
        -INT) also stops the reply instead of ending the whole chat. Both are restored when the reply
        is done.
        """
        loop = asyncio.get_running_loop()
        fd = self.input.fileno()
        saved = termios.tcgetattr(fd)
        line: list[str] = []
        stops: list[asyncio.Task[None]] = []

        def stop_reply() -> None:
            if not done.is_set() and not stops:
                stops.append(loop.create_task(self._send(STOP_COMMAND, self._next_id())))

        def on_keys() -> None:
            try:
                data = os.read(fd, 1024).decode(errors="replace")
            except OSError:
                return
            for char in data:
                if char == CTRL_C:
                    stop_reply()
                elif char in "\r\n":
                    if "".join(line).strip() == STOP_COMMAND:
                        stop_reply()
                    else:
                        self._typed_lines.append("".join(line))
                    line.clear()
                elif char in ERASE:
                    if line:
                        line.pop()
                else:
                    line.append(char)

        previous_sigint = signal.getsignal(signal.SIGINT)
        tty.setcbreak(fd)
        keys = termios.tcgetattr(fd)
        keys[3] &= ~termios.ISIG  # Ctrl-C as a key (as the line editor reads it), not a signal
        termios.tcsetattr(fd, termios.TCSANOW, keys)
        loop.add_reader(fd, on_keys)
        loop.add_signal_handler(signal.SIGINT, stop_reply)
        try:
            await done.wait()
            for task in stops:
                await task  # the /stop was accepted before the next prompt shows
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, previous_sigint)  # asyncio's own Ctrl-C handling, as before
            loop.remove_reader(fd)
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
            self._typeahead += "".join(line)
