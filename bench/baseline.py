"""A DeerFlow-shaped, in-memory message path: the yardstick the durable path is measured against.

Shaped like DeerFlow's channel path (its ``MessageBus`` + ``ChannelManager``): the channel puts each
message on an ``asyncio.Queue``; one dispatch loop takes it and starts a task per message under a
concurrency semaphore; the task maps the chat to a thread (a dict), runs the same instant agent to the
end, and hands the answer to an outbound queue whose dispatcher sends it through the same in-memory
channel transport. No durability, identity, commands, lanes, streaming or hooks: the same per-message
work minus everything Switchboard adds. Used by ``bench.manager --compare baseline``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from agent.events import TextDelta, TurnFinished, TurnRequest
from channels.memory import MemoryChannel
from channels.types import InboundMessage


class BaselineAgent:
    """The same instant agent as ``bench.manager.InstantAgent.run``: one delta, then the answer."""

    async def run(self, request: TurnRequest) -> Any:
        yield TextDelta("ok")
        yield TurnFinished(text=f"ok: {request.text}")


class BaselinePath:
    """Inbound queue → dispatcher → task per message → agent → outbound queue → channel."""

    def __init__(
        self, channel: MemoryChannel, on_replied: Callable[[InboundMessage], None], concurrency: int = 32
    ):
        self.channel = channel
        self.on_replied = on_replied
        self.agent = BaselineAgent()
        self.inbound: asyncio.Queue[InboundMessage | None] = asyncio.Queue()
        self.outbound: asyncio.Queue[tuple[InboundMessage, str] | None] = asyncio.Queue()
        self.threads: dict[tuple[str, str, str], str] = {}
        self.semaphore = asyncio.Semaphore(concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []

    async def publish(self, message: InboundMessage) -> bool:
        await self.inbound.put(message)
        return True

    async def start(self) -> None:
        await self.channel.start(self.publish)
        self._loops = [asyncio.create_task(self._dispatch()), asyncio.create_task(self._send())]

    async def stop(self) -> None:
        await self.inbound.put(None)
        await self.outbound.put(None)
        await asyncio.gather(*self._loops, *self.tasks)

    async def _dispatch(self) -> None:
        while (message := await self.inbound.get()) is not None:
            task = asyncio.create_task(self._handle(message))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _handle(self, message: InboundMessage) -> None:
        async with self.semaphore:
            key = (message.provider, message.workspace, message.chat)
            thread_id = self.threads.get(key)
            if thread_id is None:
                thread_id = self.threads[key] = uuid.uuid4().hex
            request = TurnRequest(
                thread_id=thread_id, owner=f"{message.provider}:{message.sender.id}", text=message.text
            )
            answer = ""
            async for event in self.agent.run(request):
                if isinstance(event, TurnFinished):
                    answer = event.text
            await self.outbound.put((message, answer))

    async def _send(self) -> None:
        while (item := await self.outbound.get()) is not None:
            message, answer = item
            transport = self.channel.reply_transport(message)
            await transport.send(answer)
            await transport.finished()
            self.on_replied(message)
