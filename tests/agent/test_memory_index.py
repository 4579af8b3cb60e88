"""Issue 32: an owner's facts are indexed once; a turn's memory block and a merge read only what matches.

What a user notices: the facts about what they just asked come first, the block stays within its budget,
and a re-learned fact replaces its near-duplicate instead of piling up — with 10,000 facts as with 10.
"""

from __future__ import annotations

import time
import uuid

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import create_async_engine

from agent.memory import CandidateFact, Fact, MemoryStore, render_memory
from agent.tables import memory_facts, metadata


def fact(content: str, confidence: float, age: float = 0.0) -> Fact:
    now = time.time() - age
    return Fact(uuid.uuid4().hex, content, "other", confidence, now, now)


def test_the_facts_about_the_question_come_first_and_the_block_keeps_its_budget():
    facts = [fact(f"likes topic number {i} a lot", 0.9) for i in range(2000)]
    facts.append(fact("writes Rust for embedded boards", 0.6))
    block = render_memory(facts, "Alice writes Rust.", "which Rust crate for embedded work?", 60)
    lines = block.splitlines()
    assert lines[2] == "Summary: Alice writes Rust."
    assert lines[3] == "- writes Rust for embedded boards (other)"  # two query words beat confidence
    assert sum(len(line) // 4 for line in lines[1:-1]) <= 60


def test_a_question_without_known_words_gets_the_most_confident_facts():
    facts = [
        fact("prefers tabs", 0.7),
        fact("works at a bakery", 0.95),
        fact("old hobby", 0.99, age=3 * 86400),
    ]
    block = render_memory(facts, None, "hello there", 800)
    # 0.95 + 0.1 (recent) ranks above 0.99 (older than a day), then 0.7 + 0.1.
    assert block.splitlines()[2:5] == [
        "- works at a bakery (other)",
        "- old hobby (other)",
        "- prefers tabs (other)",
    ]


async def test_a_relearned_fact_among_ten_thousand_updates_its_near_duplicate(tmp_path):
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}")
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        now = time.time()
        rows = [
            {
                "id": uuid.uuid4().hex,
                "owner": "o",
                "content": f"project {i} uses language {i % 97}",
                "category": "project",
                "confidence": 0.6,
                "created_at": now,
                "updated_at": now,
            }
            for i in range(10_000)
        ]
        await conn.execute(insert(memory_facts), rows)
    store = MemoryStore(engine)
    before, _summary = await store.view("o")
    candidate = CandidateFact("project 4242 uses language 71 daily", "project", 0.9)
    await store.merge("o", [candidate, CandidateFact("???", "other", 0.8)], None, max_facts=10_000)
    facts = await store.facts("o")
    assert len(facts) == 10_000  # one updated in place; "???" added, the weakest evicted
    assert facts[0].content == candidate.content and facts[0].confidence == 0.9
    assert "project 4242 uses language 71" not in {f.content for f in facts}
    after, _summary = await store.view("o")
    assert (
        after is not before
        and after.render(None, "daily", 60).splitlines()[2] == f"- {candidate.content} (project)"
    )
    await engine.dispose()
