"""Benchmark: N chats × M messages through bus → inbox → manager → agent → in-memory channel.

It measures Switchboard's own overhead, so the "model" answers instantly:

* ``--agent instant`` (default): an agent that yields its answer at once. What is left is the bot:
  durable inbox (SQLite, group commit), bus, identity and thread lookup, per-thread lanes, reply stream,
  and — as in the default configuration — the memory and goal after-turn hooks over the real stores.
* ``--agent langgraph``: the real LangGraph runtime and SQLite checkpointer over an in-process chat
  model that answers instantly — the same plus the agent runtime's own cost.

The configuration is the default one (memory and goals on, default ``bus.max_concurrent_turns``); only
the database path, ``bus.queue_size`` (so a burst fits) and the model are set. Each chat sends its next
message when the previous one is finished, so ``--chats`` is the number of conversations in flight. A
message's latency is from handing it to the bus until the inbox has marked it done (after the final
reply is delivered).

Variants run interleaved in one process (``--rounds`` times each) and are reported as ratios, because
the shared machine is noisy: by default the durable inbox against an in-memory stand-in (the
"durability tax") and hooks on against hooks off. Run:  python -m bench.manager --chats 100 --messages 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.events import TextDelta, TurnFinished, TurnRequest
from agent.goals import GoalKeeper, GoalStore
from agent.memory import MemoryService, MemoryStore
from bench.baseline import BaselinePath
from bench.memory_inbox import MemoryInbox
from bot.bus import MessageBus
from bot.inbox import Inbox, InboxEntry
from bot.service import Service
from channels.memory import MemoryChannel
from channels.types import InboundMessage
from config.loader import load_settings
from config.schema import Settings


class InstantAgent:
    """Answers every turn immediately; stands in for a model with zero latency.

    ``goals`` and ``memory`` are the real keeper and memory service over the service's database, as the
    runtime builds them, so their after-turn hooks cost what they cost in production.
    """

    def __init__(self) -> None:
        self.goals: GoalKeeper | None = None
        self.memory: MemoryService | None = None

    def attach(self, settings: Settings, service: Service) -> None:
        engine = service.db.engine
        self.goals = GoalKeeper(GoalStore(engine), chat_model=self._no_model, max_continuations=3)
        if settings.memory.enabled:
            self.memory = MemoryService(
                settings.memory, MemoryStore(engine), chat_model=self._no_model, transcript=self._transcript
            )

    @staticmethod
    def _no_model(name: str | None) -> Any:
        raise RuntimeError("the benchmark sets no goal and runs no extraction")

    @staticmethod
    async def _transcript(thread_id: str) -> list[Any]:
        return []

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

    def sandbox_limits(self) -> dict[str, object]:
        return {}

    async def storage_problem(self) -> str | None:
        return None

    async def close(self) -> None:
        if self.memory is not None:
            await self.memory.close()


class DoneClock:
    """Resolves a message's future when the inbox has marked it done: the end of the measured path."""

    def __init__(self) -> None:
        self.waiters: dict[str, asyncio.Future[float]] = {}
        self.entries: dict[str, str] = {}  # inbox entry id -> platform message id

    def accepted(self, entry: InboxEntry) -> None:
        self.entries[entry.id] = entry.message.platform_message_id

    def done(self, entry_id: str) -> None:
        waiter = self.waiters.pop(self.entries.pop(entry_id, ""), None)
        if waiter is not None and not waiter.done():
            waiter.set_result(time.perf_counter())


def timed(base: type[Any], clock: DoneClock) -> type[Any]:
    """``base`` (the durable or the in-memory inbox) that tells ``clock`` about accepts and dones."""

    class Timed(base):  # type: ignore[misc, valid-type]
        async def accept(self, message: InboundMessage) -> InboxEntry:
            entry: InboxEntry = await super().accept(message)
            clock.accepted(entry)
            return entry

        async def mark_done(self, entry_id: str, note: str | None = None) -> None:
            await super().mark_done(entry_id, note)
            clock.done(entry_id)

    return Timed


def instant_chat_model() -> Any:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    return FakeListChatModel(responses=["ok"] * 1_000_000)


@dataclass(frozen=True, slots=True)
class Variant:
    """One configuration of a run; several are interleaved in one process and compared."""

    inbox: str = "durable"  # or "memory", or "baseline" (bench/baseline.py: no Switchboard at all)
    hooks: bool = True
    gc_tuned: bool = False

    @property
    def label(self) -> str:
        if self.inbox == "baseline":
            return "DeerFlow-shaped in-memory baseline"
        parts = [f"{self.inbox} inbox", "hooks on" if self.hooks else "hooks off"]
        return ", ".join(parts + (["gc tuned"] if self.gc_tuned else []))


async def run_baseline(chats: int, messages: int, rate: float | None, cold: bool) -> dict[str, float]:
    """The same load through ``bench.baseline.BaselinePath``; the clock stops when the reply is sent."""
    channel = MemoryChannel("bench")
    waiters: dict[str, asyncio.Future[float]] = {}

    def replied(message: InboundMessage) -> None:
        waiter = waiters.pop(message.platform_message_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(time.perf_counter())

    path = BaselinePath(channel, replied)
    await path.start()
    latencies: list[float] = []

    async def send(index: int, n: int) -> None:
        message = channel.make_message(f"message {n}", chat=f"chat-{index}", message_id=f"{index}-{n}")
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        waiters[message.platform_message_id] = done
        start = time.perf_counter()
        await channel.deliver(message)
        latencies.append(await done - start)

    result = await _drive(chats, messages, rate, cold, send, latencies)
    await path.stop()
    return {**result, "not_done": float(len(waiters))}


async def _drive(
    chats: int,
    messages: int,
    rate: float | None,
    cold: bool,
    send: Any,
    latencies: list[float],
    settle: Any = None,
) -> dict[str, float]:
    """Closed or open loop over ``send(chat index, message number)``; the timing both paths share.

    ``settle`` (optional) is awaited after the last message is done, still inside the GC and CPU window:
    the after-turn hooks run after a turn is marked done, and in a burst their writes outlast it."""

    async def one_chat(index: int) -> None:
        if rate is None:  # closed loop: the next message goes when the previous one is done
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

    if not cold:
        await asyncio.gather(*(send(i, -1) for i in range(chats)))
        latencies.clear()
    collections = sum(s["collections"] for s in gc.get_stats())
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    began, cpu_began = time.perf_counter(), time.process_time()
    try:
        await asyncio.gather(*(one_chat(i) for i in range(chats)))
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu_began
        if settle is not None:
            await settle()
        settled, cpu_settled = time.perf_counter() - began, time.process_time() - cpu_began
    finally:
        gc.callbacks.remove(pauses)
    collections = sum(s["collections"] for s in gc.get_stats()) - collections
    total = chats * messages
    ordered = sorted(latencies)
    return {
        "messages": total,
        "seconds": elapsed,
        "messages_per_second": total / elapsed,
        "cpu_ms_per_message": cpu / total * 1000,
        "settle_ms": (settled - elapsed) * 1000,
        "cpu_ms_per_message_settled": cpu_settled / total * 1000,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gc_collections": collections,
        "gc_longest_ms": pauses.longest * 1000,
        "gc_longest_cpu_ms": pauses.longest_cpu * 1000,
        "gc_cpu_ms_per_message": pauses.total_cpu / total * 1000,
        **{f"gc_longest_gen{g}_ms": pauses.by_generation[g] * 1000 for g in range(3)},
    }


class GcPauses:
    """A ``gc.callbacks`` hook that keeps the longest collection (a pause every coroutine waits out)."""

    def __init__(self) -> None:
        self.started = self.cpu_started = 0.0
        self.longest = self.longest_cpu = 0.0
        self.by_generation = [0.0, 0.0, 0.0]  # the longest of each generation (CPU time)
        self.total_cpu = 0.0  # all collections together (CPU time of the collecting threads)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started, self.cpu_started = time.perf_counter(), time.thread_time()
            return
        # Wall time includes being descheduled on a loaded machine; the thread's CPU time is what the
        # collection itself costs (the pause on a machine with a core to spare).
        took, cpu = time.perf_counter() - self.started, time.thread_time() - self.cpu_started
        self.longest = max(self.longest, took)
        self.longest_cpu = max(self.longest_cpu, cpu)
        self.total_cpu += cpu
        generation = info["generation"]
        self.by_generation[generation] = max(self.by_generation[generation], cpu)


async def run(
    chats: int,
    messages: int,
    agent: str,
    data_dir: Path,
    features: bool,
    rate: float | None = None,
    variant: Variant = Variant(),
    cold: bool = False,
    owners: str = "one",
) -> dict[str, float]:
    overrides: dict[str, Any] = {
        "data_dir": str(data_dir),
        "database": {"url": f"sqlite+aiosqlite:///{data_dir / 'bench.db'}"},
        "bus": {"queue_size": max(1000, chats * 2)},
        "models": [{"name": "default", "api_key": "unused"}],
    }
    if not variant.hooks:
        overrides["memory"] = {"enabled": False}
    settings = load_settings(overrides=overrides, env={})
    channel = MemoryChannel("bench")
    kwargs: dict[str, Any] = {"channels": {"bench": channel}}
    instant = InstantAgent() if agent == "instant" else None
    if instant is not None:
        kwargs["agent"] = instant
    else:
        kwargs["chat_models"] = {"default": instant_chat_model()}
    service = Service(settings, **kwargs)
    if not features:
        service.features = []
    if instant is not None and variant.hooks:
        instant.attach(settings, service)
    clock = DoneClock()
    if variant.inbox == "memory":
        service.inbox = timed(MemoryInbox, clock)(max_attempts=settings.bus.max_attempts)
    else:
        service.inbox = timed(Inbox, clock)(service.db, max_attempts=settings.bus.max_attempts)
    service.bus = MessageBus(service.inbox, settings.bus.queue_size)
    await service.start()
    keeper = None
    if variant.gc_tuned:
        from bot import gc_tuning

        gc_tuning.tune_gc()
        if hasattr(gc_tuning, "start_keeper"):  # a tree from before the keeper (before/after runs)
            keeper = gc_tuning.start_keeper(lambda: service.bus.load == 0)
    latencies: list[float] = []

    async def send(index: int, n: int) -> None:
        # One person in every chat (the default) or a person per chat: a burst of new owners.
        sender = "user-1" if owners == "one" else f"user-{index}"
        message = channel.make_message(
            f"message {n}", chat=f"chat-{index}", sender=sender, message_id=f"{index}-{n}"
        )
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        clock.waiters[message.platform_message_id] = done
        start = time.perf_counter()
        await channel.deliver(message)
        latencies.append(await done - start)

    assert service.manager is not None
    if not cold:
        # Warm up every conversation (thread rows, caches) so first-use costs are not measured.
        await asyncio.gather(*(send(i, -1) for i in range(chats)))
        await service.manager.wait_idle()  # and their after-turn hooks (first notes of each thread)
        latencies.clear()
    profiler = None
    if os.environ.get("BENCH_PROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    manager = service.manager
    result = await _drive(chats, messages, rate, True, send, latencies, settle=manager.wait_idle)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.environ["BENCH_PROFILE"])
    counts = await service.inbox.counts()
    if keeper is not None:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
    await service.stop()
    if variant.gc_tuned:
        from bot import gc_tuning

        if hasattr(gc_tuning, "untune_gc"):
            gc_tuning.untune_gc()
        else:
            gc.unfreeze()
            gc.set_threshold(700, 10, 10)
    return {**result, "not_done": sum(n for status, n in counts.items() if status != "done")}


VARIANTS = {
    "tax": [Variant("durable"), Variant("memory")],
    "hooks": [Variant(hooks=True), Variant(hooks=False)],
    "gc": [Variant(gc_tuned=True), Variant(gc_tuned=False)],
    "baseline": [Variant("durable", gc_tuned=True), Variant("baseline")],
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
    parser.add_argument(
        "--compare",
        choices=sorted(VARIANTS),
        action="append",
        help="pairs to interleave: tax (durable vs in-memory inbox), hooks (on vs off), gc (tuned vs not), "
        "baseline (durable vs a DeerFlow-shaped in-memory path, bench/baseline.py); "
        "default: tax and hooks",
    )
    parser.add_argument(
        "--cold", action="store_true", help="no warm-up: every chat is new (a burst of new conversations)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repetitions of each variant")
    parser.add_argument(
        "--owners",
        choices=["one", "per-chat"],
        default="one",
        help="who writes: one person in every chat (default), or a different person per chat (a burst of "
        "new owners: each a new memory entry)",
    )
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    compare = args.compare or ["tax", "hooks"]
    variants = list(dict.fromkeys(v for name in compare for v in VARIANTS[name]))
    results: dict[Variant, list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for variant in variants:
            with tempfile.TemporaryDirectory() as tmp:
                if variant.inbox == "baseline":
                    results[variant].append(
                        asyncio.run(run_baseline(args.chats, args.messages, args.rate, args.cold))
                    )
                    continue
                results[variant].append(
                    asyncio.run(
                        run(
                            args.chats,
                            args.messages,
                            args.agent,
                            Path(tmp),
                            not args.no_features,
                            args.rate,
                            variant,
                            args.cold,
                            args.owners,
                        )
                    )
                )
    print(
        f"agent={args.agent} chats={args.chats} messages/chat={args.messages} "
        f"{'rate=' + format(args.rate, 'g') + '/s' if args.rate else 'closed loop'} cpus={os.cpu_count()} "
        f"python={sys.version.split()[0]} rounds={args.rounds} owners={args.owners} "
        f"load={os.getloadavg()[0]:.2f}"
    )
    medians: dict[Variant, dict[str, float]] = {}
    for variant, runs in results.items():
        medians[variant] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        m = medians[variant]
        print(
            f"{variant.label}: {m['messages']:.0f} messages in {m['seconds']:.2f}s: "
            f"{m['messages_per_second']:.0f} msg/s, latency p50 {m['p50_ms']:.2f} ms, p99 {m['p99_ms']:.2f} ms, "
            f"CPU {m['cpu_ms_per_message']:.3f} ms/message ({m['cpu_ms_per_message_settled']:.3f} with the "
            f"after-turn hooks settled, {m['settle_ms']:.0f} ms later), {m['gc_collections']:.0f} GC collections "
            f"(longest {m['gc_longest_ms']:.1f} ms wall, {m['gc_longest_cpu_ms']:.1f} ms CPU; CPU by generation "
            f"{m['gc_longest_gen0_ms']:.1f}/{m['gc_longest_gen1_ms']:.1f}/{m['gc_longest_gen2_ms']:.1f}; "
            f"all collections {m['gc_cpu_ms_per_message']:.3f} ms CPU/message), "
            f"{m['not_done']:.0f} not done, "
            f"peak RSS {m['peak_rss_mib']:.0f} MiB (medians of {len(runs)})"
        )
    for name in compare:
        first, second = (medians[v] for v in VARIANTS[name])
        print(
            f"{name}: {VARIANTS[name][0].label} / {VARIANTS[name][1].label}: throughput "
            f"{first['messages_per_second'] / second['messages_per_second']:.2f}x, "
            f"p99 {first['p99_ms'] / second['p99_ms']:.2f}x, "
            f"CPU {first['cpu_ms_per_message'] / second['cpu_ms_per_message']:.2f}x"
        )


if __name__ == "__main__":
    main()
