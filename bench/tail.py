"""Where the open loop's slow messages come from: ``bench.manager``'s durable path with timestamps.

The open-loop p99 (``bench.manager --rate``) is occasional stalls, not the per-message cost, and their
source was a list of candidates (the WAL checkpoint thread, a batch falling back to the writer thread,
other processes on the cores). This runs the same load and records, with ``time.perf_counter``:

* each message's accept-to-done span;
* the inbox's batches on the loop (wall time, the loop thread's CPU time, and the time it spent
  *runnable but not running* — waiting for a core — from ``/proc/thread-self/schedstat``), batches that
  went to the writer thread, WAL checkpoints, and garbage collections;
* every moment the event loop was late by more than 4 ms (a 1 ms sleep that took longer), with the same
  three clocks.

A stall whose off-CPU time is run-queue time was another process's turn on the core; off-CPU time that
is not run-queue time was a wait (I/O, a lock). It prints the slowest messages with what overlapped
them, and the totals. Run:  python -m bench.tail --rate 100 --messages 10
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench.manager as bm
from bot import db as bot_db
from bot import inbox as bot_inbox
from channels.memory import MemoryChannel
from channels.types import InboundMessage

clock = time.perf_counter
Event = tuple[str, float, float, float, float]  # kind, start, end, loop-thread CPU s, run-queue wait s


def run_queue_wait() -> float:
    """Seconds this thread has waited on a run queue (runnable, not running) since it started."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:  # not Linux: the split between "another process ran" and "we waited" is unknown
        return 0.0


class Recorder:
    """Patches the durable path's hooks points (a benchmark's copy: nothing here runs in the service)."""

    def __init__(self) -> None:
        self.starts: dict[str, float] = {}
        self.ends: dict[str, float] = {}
        self.events: list[Event] = []
        self._gc_started = (0.0, 0.0)

    def install(self) -> None:
        recorder = self
        deliver, done = MemoryChannel.deliver, bm.DoneClock.done
        checkpoint, waiting = bot_db.Database._checkpoint, bot_inbox._SqliteWriter.apply_waiting
        try_apply = bot_inbox._SqliteWriter.try_apply

        async def timed_deliver(channel: MemoryChannel, message: InboundMessage) -> bool:
            recorder.starts[message.platform_message_id] = clock()
            return await deliver(channel, message)

        def timed_done(done_clock: bm.DoneClock, entry_id: str) -> None:
            message_id = done_clock.entries.get(entry_id)
            if message_id is not None:
                recorder.ends[message_id] = clock()
            done(done_clock, entry_id)

        def timed_checkpoint(database: bot_db.Database, mode: str) -> None:
            with recorder.span("checkpoint (thread)", on_loop=False):
                checkpoint(database, mode)

        def timed_waiting(writer: Any, ops: Sequence[Any]) -> dict[int, Any]:
            with recorder.span("inbox batch in the writer thread", on_loop=False):
                result: dict[int, Any] = waiting(writer, ops)
            return result

        def timed_try(writer: Any, ops: Sequence[Any]) -> dict[int, Any] | None:
            with recorder.span("inbox batch on the loop"):
                result: dict[int, Any] | None = try_apply(writer, ops)
            return result

        MemoryChannel.deliver = timed_deliver  # type: ignore[method-assign]
        bm.DoneClock.done = timed_done  # type: ignore[method-assign]
        bot_db.Database._checkpoint = timed_checkpoint  # type: ignore[method-assign]
        bot_inbox._SqliteWriter.apply_waiting = timed_waiting  # type: ignore[method-assign]
        bot_inbox._SqliteWriter.try_apply = timed_try  # type: ignore[method-assign]
        gc.callbacks.append(self._gc)

    def span(self, kind: str, *, on_loop: bool = True) -> _Span:
        return _Span(self, kind, on_loop)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = (clock(), time.thread_time())
            return
        began, cpu = self._gc_started
        self.events.append((f"gc gen{info['generation']}", began, clock(), time.thread_time() - cpu, 0.0))

    async def watch_loop(self) -> None:
        """Record every loop round that came more than 4 ms late for a 1 ms sleep."""
        while True:
            began, cpu, queued = clock(), time.thread_time(), run_queue_wait()
            await asyncio.sleep(0.001)
            if clock() - began > 0.004:
                self.events.append(
                    ("loop late", began, clock(), time.thread_time() - cpu, run_queue_wait() - queued)
                )


class _Span:
    def __init__(self, recorder: Recorder, kind: str, on_loop: bool) -> None:
        self.recorder, self.kind, self.on_loop = recorder, kind, on_loop

    def __enter__(self) -> None:
        self.began, self.cpu, self.queued = clock(), time.thread_time(), run_queue_wait()

    def __exit__(self, *_exc: object) -> None:
        cpu = time.thread_time() - self.cpu if self.on_loop else 0.0
        queued = run_queue_wait() - self.queued if self.on_loop else 0.0
        self.recorder.events.append((self.kind, self.began, clock(), cpu, queued))


def report(recorder: Recorder, show: int) -> None:
    """The slowest messages with what overlapped them, then totals per kind of event."""
    latency = sorted(
        (recorder.ends[k] - recorder.starts[k], k)
        for k in recorder.ends
        if k in recorder.starts and not k.endswith("--1")  # the warm-up messages
    )
    p99 = latency[int(len(latency) * 0.99)][0]
    print(
        f"{len(latency)} messages: p50 {latency[len(latency) // 2][0] * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"
    )
    print("slowest (ms); overlapping events > 0.3 ms as (kind, wall, loop CPU, waiting for a core):")
    for took, key in latency[-show:]:
        began, ended = recorder.starts[key], recorder.ends[key]
        near = [
            (kind, round((t1 - t0) * 1000, 1), round(cpu * 1000, 1), round(queued * 1000, 1))
            for kind, t0, t1, cpu, queued in recorder.events
            if t1 > began and t0 < ended and t1 - t0 > 0.0003
        ]
        print(f"  {took * 1000:7.2f} {key}: {near[:5]}")
    print(
        "events: count, median / max wall ms, and for the loop's: off-CPU ms and the share waiting for a core"
    )
    for kind in sorted({e[0] for e in recorder.events}):
        rows = [e for e in recorder.events if e[0] == kind]
        walls = [(t1 - t0) * 1000 for _k, t0, t1, _c, _q in rows]
        off = sum((t1 - t0) - cpu for _k, t0, t1, cpu, _q in rows)
        queued = sum(q for *_rest, q in rows)
        share = (
            f", off CPU {off * 1000:.0f} ms, {queued / off * 100:.0f}% waiting for a core" if queued else ""
        )
        print(f"  {kind}: {len(rows)}, {statistics.median(walls):.2f} / {max(walls):.2f}{share}")
    blocked_during_checkpoints(recorder.events)


def blocked_during_checkpoints(events: list[Event]) -> None:
    """Batches on the loop that were *blocked* (off the CPU and not waiting for a core: a system call
    waited) for over a millisecond, and how many of them overlapped a WAL checkpoint in its thread."""
    checkpoints = [(t0, t1) for kind, t0, t1, _c, _q in events if kind.startswith("checkpoint")]
    blocked = [
        (t0, t1, (t1 - t0) - cpu - queued)
        for kind, t0, t1, cpu, queued in events
        if kind == "inbox batch on the loop" and (t1 - t0) - cpu - queued > 0.001
    ]
    during = [b for b in blocked if any(c1 > b[0] and c0 < b[1] for c0, c1 in checkpoints)]
    print(
        f"inbox batches on the loop blocked > 1 ms: {len(blocked)} ({sum(b[2] for b in blocked) * 1000:.0f} ms), "
        f"of which during a checkpoint: {len(during)} ({sum(b[2] for b in during) * 1000:.0f} ms)"
    )


async def measure(rate: float, messages: int, chats: int) -> Recorder:
    recorder = Recorder()
    recorder.install()
    watcher = asyncio.create_task(recorder.watch_loop())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            variant = bm.Variant("durable", gc_tuned=True)
            await bm.run(chats, messages, "instant", Path(tmp), True, rate, variant)
    finally:
        watcher.cancel()
    return recorder


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=100.0, help="messages/s over all chats (open loop)")
    parser.add_argument("--messages", type=int, default=10, help="messages per chat")
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--show", type=int, default=10, help="how many of the slowest messages to list")
    args = parser.parse_args()
    report(asyncio.run(measure(args.rate, args.messages, args.chats)), args.show)


if __name__ == "__main__":
    main()
