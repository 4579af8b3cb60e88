"""Token usage per thread, as the provider reported it, for ``/status``.

Numbers come from the model's own usage report (``usage_metadata``; for OpenAI-compatible servers the
usage chunk at the end of a stream, which ``stream_usage`` asks for), summed over a turn's model calls —
including context summaries made during the turn, not the goal evaluator or memory extraction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from agent.tables import thread_usage


@dataclass(frozen=True, slots=True)
class ThreadUsage:
    model: str
    last_input: int
    last_output: int
    total_input: int
    total_output: int
    turns: int

    def describe(self) -> str:
        return (
            f"Tokens: last turn {self.last_input:,} in / {self.last_output:,} out ({self.model}); "
            f"thread total {self.total_input:,} in / {self.total_output:,} out over {self.turns} turn(s)"
        )


class UsageStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def get(self, thread_id: str) -> ThreadUsage | None:
        async with self.engine.connect() as conn:
            row = (
                (await conn.execute(select(thread_usage).where(thread_usage.c.thread_id == thread_id)))
                .mappings()
                .first()
            )
        if row is None:
            return None
        return ThreadUsage(
            row["model"],
            row["last_input_tokens"],
            row["last_output_tokens"],
            row["total_input_tokens"],
            row["total_output_tokens"],
            row["turns"],
        )

    async def record(self, thread_id: str, model: str, input_tokens: int, output_tokens: int) -> None:
        """Add one turn; totals are incremented in SQL so concurrent writers cannot lose a turn."""
        now = time.time()
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(thread_usage)
                .where(thread_usage.c.thread_id == thread_id)
                .values(
                    model=model,
                    last_input_tokens=input_tokens,
                    last_output_tokens=output_tokens,
                    total_input_tokens=thread_usage.c.total_input_tokens + input_tokens,
                    total_output_tokens=thread_usage.c.total_output_tokens + output_tokens,
                    turns=thread_usage.c.turns + 1,
                    updated_at=now,
                )
            )
            if not result.rowcount:
                await conn.execute(
                    insert(thread_usage).values(
                        thread_id=thread_id,
                        model=model,
                        last_input_tokens=input_tokens,
                        last_output_tokens=output_tokens,
                        total_input_tokens=input_tokens,
                        total_output_tokens=output_tokens,
                        turns=1,
                        updated_at=now,
                    )
                )
