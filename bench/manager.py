"""Benchmark: N chats × M messages through bus → inbox → manager → agent → in-memory channel.

It measures Switchboard's own overhead, so the "model" answers instantly:

* ``--agent instant`` (default): an agent that yields its answer at once. What is left is the bot:
  durable inbox (SQLite, group commit), bus, identity and thread lookup, per-thread lanes, reply stream.
* ``--agent langgraph``: the real LangGraph runtime and SQLite checkpointer over an in-process chat
  model that answers instantly — the same plus the agent runtime's own cost.

Each chat sends its next message when the previous reply is finished, so ``--chats`` is the number
of conversations in flight. Latency is from handing the message to the bus to the final reply being
delivered. Run:  python -m bench.manager --chats 100 --messages 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agent.events import TextDelta, TurnFinished, TurnRequest
from bot.service import Service
from channels.memory import MemoryChannel, MemoryTransport
from channels.reply import ReplyTransport
from channels.types import InboundMessage
from config.loader import load_settings


class InstantAgent:
    """Answers every turn immediately; stands in for a model with zero latency."""

    goals = None  # no optional capabilities
    memory = None

    async def run(self, request: TurnRequest) -> AsyncIterator[Any]:
        yield TextDelta("ok")
        yield TurnFinished(text=f"ok: {request.text}")

    def model_names(self) -> list[str]:
        return ["instant"]

    def skill_names(self) -> list[str]:
        return []

    def tool_descriptions(self) -> list[tuple[str, str]]:
        return []

    def mcp_status(self) -> dict[str, str]:
        return {}

    async def close(self) -> None:
        return None


class TimedTransport(MemoryTransport):
    async def finished(self) -> None:
        waiter = self.channel.waiters.pop(self.message.platform_message_id, None)  # type: ignore[attr-defined]
        if waiter is not None:
            waiter.set_result(time.perf_counter())


class TimedChannel(MemoryChannel):
    def __init__(self) -> None:
        super().__init__("bench")
        self.waiters: dict[str, asyncio.Future[float]] = {}

    def reply_transport(self, message: InboundMessage) -> ReplyTransport:
        return TimedTransport(self, message)


def instant_chat_model() -> Any:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    return FakeListChatModel(responses=["ok"] * 1_000_000)


async def run(
    chats: int, messages: int, agent: str, data_dir: Path, features: bool, rate: float | None = None
) -> dict[str, float]:
    settings = load_settings(
        overrides={
            "data_dir": str(data_dir),
            "database": {"url": f"sqlite+aiosqlite:///{data_dir / 'bench.db'}"},
            "bus": {"queue_size": max(1000, chats * 2), "max_concurrent_turns": max(32, chats)},
            "memory": {"enabled": False},
            "models": [{"name": "default", "api_key": "unused"}],
        },
        env={},
    )
    channel = TimedChannel()
    kwargs: dict[str, Any] = {"channels": {"bench": channel}}
    if agent == "instant":
        kwargs["agent"] = InstantAgent()
    else:
        kwargs["chat_models"] = {"default": instant_chat_model()}
    if not features:
        kwargs["features"] = []
    service = Service(settings, **kwargs)
    await service.start()
    latencies: list[float] = []

    async def send(index: int, n: int) -> None:
        message = channel.make_message(f"message {n}", chat=f"chat-{index}", message_id=f"{index}-{n}")
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        channel.waiters[message.platform_message_id] = done
        start = time.perf_counter()
        await channel.deliver(message)
        latencies.append(await done - start)

    async def one_chat(index: int) -> None:
        if rate is None:  # closed loop: the next message goes when the previous reply is done
            for n in range(messages):
                await send(index, n)
            return
        # Open loop: this chat sends every chats/rate seconds whatever the replies do.
        period = chats / rate
        await asyncio.sleep(random.random() * period)
        pending = []
        for n in range(messages):
            pending.append(asyncio.create_task(send(index, n)))
            await asyncio.sleep(period)
        await asyncio.gather(*pending)

    # Warm up every conversation (thread rows, caches) so first-use costs are not measured.
    await asyncio.gather(*(send(i, -1) for i in range(chats)))
    latencies.clear()
    profiler = None
    if os.environ.get("BENCH_PROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    began, cpu_began = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one_chat(i) for i in range(chats)))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.environ["BENCH_PROFILE"])
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    await service.stop()
    total = chats * messages
    ordered = sorted(latencies)
    return {
        "messages": total,
        "seconds": elapsed,
        "messages_per_second": total / elapsed,
        "cpu_ms_per_message": cpu / total * 1000,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--agent", choices=["instant", "langgraph"], default="instant")
    parser.add_argument("--no-features", action="store_true", help="skip connections/agent/github features")
    parser.add_argument(
        "--rate", type=float, help="open loop: total messages/s spread over the chats (default: closed loop)"
    )
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(
            run(args.chats, args.messages, args.agent, Path(tmp), not args.no_features, args.rate)
        )
    print(
        f"agent={args.agent} chats={args.chats} messages/chat={args.messages} "
        f"{'rate=' + format(args.rate, 'g') + '/s' if args.rate else 'closed loop'} cpus={os.cpu_count()} "
        f"python={sys.version.split()[0]}"
    )
    print(
        f"{result['messages']} messages in {result['seconds']:.2f}s: {result['messages_per_second']:.0f} msg/s, "
        f"added latency p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, "
        f"peak RSS {result['peak_rss_mib']:.0f} MiB, CPU {result['cpu_ms_per_message']:.2f} ms/message "
        f"(all threads; {1000 / result['cpu_ms_per_message']:.0f} msg per CPU-second)"
    )


if __name__ == "__main__":
    main()
