"""Benchmark: what an owner's remembered facts cost a turn (``prompt_block``) and an extraction (``merge``).

Real ``MemoryService`` and ``MemoryStore`` over a SQLite file; an owner with N facts of 6-12 words from a
shared vocabulary (so queries match some facts, as real ones do). Per turn: ``prompt_block`` with a fresh
query each time, wall time on the event loop included. Per extraction: ``merge`` of 10 candidates, half of
them near-duplicates. Run against another tree (before/after) with ``PYTHONPATH=<tree>``:

    python -m bench.memory_facts --facts 100 1000 10000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import create_async_engine

from agent.memory import CandidateFact, MemoryService, MemoryStore
from agent.tables import memory_facts, metadata
from config.schema import MemoryConfig

VOCABULARY = [f"word{i}" for i in range(3000)]
OWNER = "bench:-:owner"


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(6, 12)))


async def one(count: int, turns: int, data_dir: Path) -> dict[str, float]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{data_dir / f'memory-{count}.db'}")
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    rng = random.Random(count)
    now = time.time()
    rows = [
        {
            "id": uuid.uuid4().hex,
            "owner": OWNER,
            "content": sentence(rng),
            "category": "other",
            "confidence": round(rng.uniform(0.5, 1.0), 2),
            "created_at": now - i,
            "updated_at": now - i,
        }
        for i in range(count)
    ]
    async with engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            await conn.execute(insert(memory_facts), rows[start : start + 1000])
    store = MemoryStore(engine)
    service = MemoryService(
        MemoryConfig(max_facts=max(count, 100)),
        store,
        chat_model=lambda _name: None,
        transcript=lambda _thread: asyncio.sleep(0, []),  # type: ignore[arg-type, return-value]
    )
    first = time.perf_counter()
    await service.prompt_block(OWNER, sentence(rng))
    first_ms = (time.perf_counter() - first) * 1000
    samples = []
    for _ in range(turns):
        query = sentence(rng)
        began = time.perf_counter()
        block = await service.prompt_block(OWNER, query)
        samples.append((time.perf_counter() - began) * 1000)
    assert block.startswith("<memory>")
    candidates = [
        CandidateFact(rows[rng.randrange(count)]["content"] if k % 2 else sentence(rng), "other", 0.9)
        for k in range(10)
    ]
    began = time.perf_counter()
    await store.merge(OWNER, candidates, "a summary", max_facts=max(count, 100))
    merge_ms = (time.perf_counter() - began) * 1000
    began = time.perf_counter()
    await service.prompt_block(OWNER, sentence(rng))
    after_merge_ms = (time.perf_counter() - began) * 1000
    await engine.dispose()
    samples.sort()
    return {
        "first_ms": first_ms,
        "p50_ms": statistics.median(samples),
        "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "merge_ms": merge_ms,
        "after_merge_ms": after_merge_ms,
    }


async def main_async(counts: list[int], turns: int) -> None:
    print(
        f"turns={turns} cpus={os.cpu_count()} python={sys.version.split()[0]} load={os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for count in counts:
            r = await one(count, turns, Path(tmp))
            print(
                f"{count} facts: prompt_block p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms "
                f"(first {r['first_ms']:.1f} ms, first after a merge {r['after_merge_ms']:.1f} ms); "
                f"merge of 10 candidates {r['merge_ms']:.1f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--facts", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main_async(args.facts, args.turns))


if __name__ == "__main__":
    main()
