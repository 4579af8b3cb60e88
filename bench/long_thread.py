"""Benchmark: one long thread — does a turn's cost and the thread's stored history stay flat?

A single thread of ``--turns`` turns (default 200, ~700 characters of text a turn, ~140 KB in all) runs
through a real :class:`agent.runtime.AgentRuntime` (LangGraph graph, checkpointer, sandbox) against the
fake OpenAI-compatible server (tests/fakes/openai_server.py) over HTTP. The fake answers the running
summary's requests with a short summary, so compaction works as it would with a real model.

Measured per turn: CPU time of this process, less the fake server thread's own CPU (what our runtime
spends, including the HTTP client and the checkpoint store's thread). Reported: the mean of the first
and of the last ten turns and their ratio, the same for the last fifty (compaction turns amortised), and what the checkpointer holds for the thread at the end
(rows, and bytes before any compression by the store) next to the conversation's own text (all of it, and what remains after compaction:
the kept messages plus the summary).

    python -m bench.long_thread                                    # defaults, SQLite checkpoint file
    python -m bench.long_thread --store postgres                   # SWITCHBOARD_TEST_PG_URL
    python -m bench.long_thread --keep-all --history-tokens 0      # before: no pruning, no early compaction
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agent.context import SUMMARY_MARKER
from agent.events import TurnFinished, TurnRequest
from agent.runtime import AgentRuntime, message_text
from config.loader import load_settings
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text

USER_CHARS = 200
ANSWER_CHARS = 500
SUMMARY_CHARS = 1500
WINDOW = 10  # turns averaged at each end
STEADY = 50  # turns averaged for the steady state
PG_URL = "postgresql+asyncpg://postgres:postgres@127.0.0.1:5432/switchboard_test"


def reply(body: dict[str, Any]) -> Reply:
    """A long-ish answer to each turn; a short summary to a summariser request."""
    system = " ".join(str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")
    if SUMMARY_MARKER in system:
        return Reply(
            text=("Notes so far: the user is walking through a long checklist. " * 30)[:SUMMARY_CHARS]
        )
    asked = last_user_text(body)[:40]
    return Reply(
        text=(f"About {asked}: " + "here is a detailed answer. " * 30)[:ANSWER_CHARS], chunk_size=100
    )


def thread_cpu(thread_ident: int | None) -> float:
    if thread_ident is None:
        return 0.0
    return time.clock_gettime(time.pthread_getcpuclockid(thread_ident))


async def stored(runtime: AgentRuntime, store: str, thread_id: str) -> tuple[int, int]:
    """(checkpoint rows, bytes) the checkpointer holds for the thread."""
    if store == "sqlite":
        conn = runtime.checkpoints.sqlite
        assert conn is not None
        rows = bytes_ = 0
        for sql in (
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints WHERE thread_id = ?",
            "SELECT 0, COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?",
        ):
            async with conn.execute(sql, (thread_id,)) as cursor:
                row = await cursor.fetchone()
                assert row is not None
                rows += int(row[0])
                bytes_ += int(row[1])
        return rows, bytes_
    pool = runtime.checkpoints.pool
    assert pool is not None
    async with pool.connection() as conn:
        rows = bytes_ = 0
        for sql in (
            "SELECT COUNT(*) AS n, COALESCE(SUM(octet_length(checkpoint::text) + octet_length(metadata::text)), 0) AS b FROM checkpoints WHERE thread_id = %s",
            "SELECT 0 AS n, COALESCE(SUM(octet_length(blob)), 0) AS b FROM checkpoint_blobs WHERE thread_id = %s",
            "SELECT 0 AS n, COALESCE(SUM(octet_length(blob)), 0) AS b FROM checkpoint_writes WHERE thread_id = %s",
        ):
            cursor = await conn.execute(sql, (thread_id,))
            row = await cursor.fetchone()
            assert row is not None
            rows += int(row["n"])
            bytes_ += int(row["b"])
        return rows, bytes_


async def main(turns: int, store: str, keep_all: bool, history_tokens: int | None) -> None:
    llm = FakeOpenAI(default_reply=reply).start()
    fake_thread = llm._thread.ident if llm._thread else None
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'switchboard.db'}"
        if store == "postgres":
            url = os.environ.get("SWITCHBOARD_TEST_PG_URL", PG_URL)
        agent: dict[str, Any] = {}
        if history_tokens is not None:
            agent["compact_history_tokens"] = history_tokens
        settings = load_settings(
            overrides={
                "data_dir": str(Path(tmp) / "data"),
                "database": {"url": url},
                "models": [
                    {"name": "default", "model": "fake", "api_key": "unused", "base_url": llm.base_url}
                ],
                "memory": {"enabled": False},
                "sandbox": {"mode": "host"},
                "agent": agent,
            },
            env={},
        )
        runtime = AgentRuntime(
            settings, checkpoint_path=Path(tmp) / "checkpoints.db" if store == "sqlite" else None
        )
        await runtime.start()
        if keep_all:
            runtime.checkpoints.prune = None  # what every release before this one did
        thread_id = f"bench-long-{uuid.uuid4().hex[:8]}"
        samples: list[float] = []
        text_chars = 0
        try:
            for i in range(turns):
                text = (f"Question {i}: " + "please look at the next item of the list. " * 10)[:USER_CHARS]
                started = time.process_time() - thread_cpu(fake_thread)
                final = None
                async for event in runtime.run(TurnRequest(thread_id=thread_id, owner="bench", text=text)):
                    if isinstance(event, TurnFinished):
                        final = event
                samples.append((time.process_time() - thread_cpu(fake_thread) - started) * 1000)
                assert final is not None and final.text.startswith("About"), final
                text_chars += len(text) + len(final.text)
            rows, size = await stored(runtime, store, thread_id)
            kept = await runtime.thread_messages(thread_id)
            snapshot = await runtime._graph.aget_state({"configurable": {"thread_id": thread_id}})
            summary = str((snapshot.values or {}).get("summary") or "")
            kept_chars = sum(len(message_text(m)) for m in kept) + len(summary)
            if store == "postgres" and runtime.checkpointer is not None:
                await runtime.checkpointer.adelete_thread(thread_id)
        finally:
            await runtime.close()
            llm.stop()
    if os.environ.get("BENCH_SAMPLES"):
        print(" ".join(f"{s:.0f}" for s in samples))
    first = statistics.mean(samples[:WINDOW])
    last = statistics.mean(samples[-WINDOW:])
    # A compaction turn (one summariser call) lands every dozen turns or so: ten turns may or may not
    # hold one, so the steady state is also given over the last STEADY turns.
    steady = statistics.mean(samples[-STEADY:])
    summarised = sum(
        1 for b in llm.completions if SUMMARY_MARKER in str(b.get("messages", [{}])[0].get("content"))
    )
    print(
        f"store={store} prune={'off' if keep_all else 'on'} history_tokens={settings.agent.compact_history_tokens} "
        f"turns={turns}: CPU/turn first {WINDOW} {first:.1f} ms, last {WINDOW} {last:.1f} ms (ratio {last / first:.2f}), "
        f"last {STEADY} {steady:.1f} ms (ratio {steady / first:.2f}); "
        f"summariser calls {summarised}"
    )
    print(
        f"  stored: {rows} checkpoint row(s), {size / 1024:.1f} KiB; conversation text {text_chars / 1024:.1f} KiB, "
        f"after compaction {kept_chars / 1024:.1f} KiB ({len(kept)} messages + {len(summary)}-char summary); "
        f"stored/after-compaction {size / max(1, kept_chars):.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--keep-all", action="store_true", help="do not prune superseded checkpoints")
    parser.add_argument("--history-tokens", type=int, default=None, help="agent.compact_history_tokens")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.store, args.keep_all, args.history_tokens))
