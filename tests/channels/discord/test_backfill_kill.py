"""kill -9 of a real ``python -m bot serve`` on Discord: the gateway never redelivers, so whatever was in
flight when the process died — received over the gateway but not yet committed to the inbox, or sent
while nothing was connected — must come back through the channel history (``GET /channels/{id}/messages``
with ``after``) on the next start, and be answered exactly once.

The many-cycle version with its numbers is ``bench/reliability_edges.py --platform discord``
(docs/PERFORMANCE.md).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from bench.reliability_edges import kill_hard, start_service, write_config
from bench.reliability_telegram import wait_for
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI

USER = "4242"


def answers(fake: FakeDiscord, dm: str, text: str) -> int:
    return sum(1 for m in fake.in_channel(dm) if m.text == f"echo: {text}")


def stored_texts(database: Path) -> set[str]:
    """What the inbox holds, read as another process reads it (only what was committed)."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        rows = conn.execute("SELECT payload FROM inbox").fetchall()
    return {json.loads(payload).get("text", "") for (payload,) in rows}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_messages_in_flight_at_a_kill_and_sent_while_down_are_answered_once_from_the_history(tmp_path: Path):
    with FakeDiscord() as fake, FakeOpenAI() as llm:
        config = write_config(tmp_path, llm, "discord", fake)
        with (tmp_path / "serve.log").open("ab") as log:
            dm = fake.dm_channel(USER)
            service = start_service(config, log)
            try:
                assert wait_for(lambda: fake.identifies, timeout=90), "the service opened a gateway session"
                # A DM the bot has answered is a DM it follows (one it never saw cannot be found again).
                fake.message_create(dm, USER, "hello")
                assert wait_for(lambda: answers(fake, dm, "hello"), timeout=60), "the warm-up answer"

                # A burst, and the process dies the moment the last frame is on the wire: these were
                # received over the gateway, some maybe stored, most not answered.
                burst = [f"burst-{i}" for i in range(6)]
                for text in burst:
                    fake.message_create(dm, USER, text)
                kill_hard(service)
                unstored = set(burst) - stored_texts(tmp_path / "bench.db")
                # Nobody is connected now: Discord keeps these only in the DM's history.
                while_down = [f"down-{i}" for i in range(3)]
                for text in while_down:
                    fake.message_create(dm, USER, text)
                history_reads = len(fake.calls_to("history"))

                service = start_service(config, log)
                everything = ["hello", *burst, *while_down]
                done = wait_for(lambda: all(answers(fake, dm, t) for t in everything), timeout=120)
                wait_for(lambda: False, timeout=1.5)  # give a late duplicate the chance to show up
            finally:
                kill_hard(service)
        assert done, (tmp_path / "serve.log").read_text()[-3000:]

    counts = {text: answers(fake, dm, text) for text in everything}
    assert counts == dict.fromkeys(everything, 1), f"not committed at the kill: {sorted(unstored)}"
    reads = fake.calls_to("history")[history_reads:]
    assert reads and all("after" in r["query"] for r in reads), (
        "the restart read the DM's history after a cursor"
    )
