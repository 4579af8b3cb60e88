"""PostgreSQL restarts under a running ``serve``: every message is answered once, without a restart.

Measured before (issue 29): after a 20 s PostgreSQL restart every later turn answered "⚠️ Something
went wrong" and its inbox row was marked done, until the service was restarted, while ``/health`` said
``database ok``. Here a real ``serve`` process runs on a PostgreSQL server of the test's own (the shared
one serves other tests and is never stopped), with Telegram's fake in webhook mode (which repeats an
update until it is stored, as Telegram does) and the fake model. The server is stopped while turns
stream and new messages arrive, and started again 20 s later.

The retry note must show *during* the outage, counted from the stop. Measured before (on a loaded
machine): the checkpointer's queries queued behind one lock, each waiting the pool's whole 5 s for a
connection, so the first turn stopped about 85 s into the outage and no note was shown in it.
:func:`test_checkpoint_queries_queued_when_postgresql_stops_all_fail_within_seconds` checks that queue
directly; agent/checkpoint_pool.py has the fix.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from agent.checkpoint_store import CHECKPOINT_CONNECT_TIMEOUT_SECONDS, CheckpointStore
from bot.faults import RETRY_NOTE, is_storage_error
from tests.fakes.openai_server import Reply, echo_reply
from tests.fakes.telegram import FakeTelegram
from tests.foundation.test_cli import free_port
from tests.operations.test_cluster_processes import health, until, wait_ready, write_telegram_config
from tests.operations.test_instances import serve, stop
from tests.private_postgres import PrivatePostgres

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 20
CHATS = list(range(701, 711))
SECRET = "outage-webhook_Secret-0123456789"


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    server.start()
    try:
        yield server
    finally:
        server.close()


def ready(port: int) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5)
    return answer.status_code, answer.json()


def component_up(port: int, component: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    prefix = f'switchboard_component_up{{component="{component}"}} '
    return float(next(line for line in text.splitlines() if line.startswith(prefix)).split()[-1])


def launch(tmp_path: Path, name: str, llm: Any, tg: FakeTelegram, url: str) -> tuple[int, Any]:
    """A ``serve`` in Telegram webhook mode: it registers itself, so the last one started receives."""
    port = free_port()
    config = write_telegram_config(
        tmp_path,
        name,
        llm.base_url,
        tg,
        url,
        {"mode": "webhook", "webhook_secret": SECRET},
        server={"host": "127.0.0.1", "port": port, "public_url": f"http://127.0.0.1:{port}"},
    )
    return port, serve(config, port)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("instances", [1, 2])
def test_postgresql_stopped_for_20_s_while_messages_arrive_every_message_is_answered_once_without_a_restart(
    tmp_path, llm, private_pg, instances
):
    """Ten turns stream when PostgreSQL stops; ten more messages arrive during the outage. /ready is 503
    with the reason meanwhile. Once the server is back, the same processes answer all twenty, each once,
    the interrupted ones in the message that showed the retry note. With two instances, any of them
    runs any message (claims in PostgreSQL), as before the outage."""

    def reply(body: dict[str, Any]) -> Reply:
        text = echo_reply(body).text
        slow = "before" in text  # still streaming when the server stops
        return Reply(text=f"{text} and that is all", chunk_size=4, delay=0.4 if slow else 0.01)

    llm.default_reply = reply
    running: list[tuple[int, Any]] = []
    outputs: list[str] = []
    with FakeTelegram(
        bot_username="switchboard_bot", local_mode=True, webhook_retry_seconds=0.5, webhook_max_attempts=1000
    ) as tg:
        try:
            for n in range(instances):
                running.append(launch(tmp_path, f"p{n + 1}", llm, tg, private_pg.url))
                wait_ready(*running[-1])
            last = running[-1][0]
            until(lambda: tg.webhook_url.startswith(f"http://127.0.0.1:{last}/"), seconds=30)
            ports = [port for port, _proc in running]
            assert [ready(port)[0] for port in ports] == [200] * instances

            for chat in CHATS:
                tg.user_message(chat, f"before {chat}", user_id=chat)
            until(lambda: all(tg.bot_messages(c) for c in CHATS), seconds=30)  # every turn streams

            private_pg.stop()
            stopped_at = time.monotonic()
            for chat in CHATS:
                tg.user_message(chat, f"during {chat}", user_id=chat)
            for port in ports:
                until(lambda port=port: ready(port)[0] == 503, seconds=10)
                status, body = ready(port)
                assert status == 503 and body["reason"].startswith("database unreachable"), body
                assert health(port)["database"].startswith("unreachable")
                assert component_up(port, "database") == 0
                # The agent cannot store a turn either, and says so (it said "ready" before).
                until(lambda port=port: health(port)["agent"].startswith("unavailable"), seconds=10)
                assert component_up(port, "agent") == 0
            # A user whose turn met the outage is told so while it lasts (not once it is over).
            until(
                lambda: any(RETRY_NOTE in m.text for c in CHATS for m in tg.bot_messages(c)),
                seconds=OUTAGE_SECONDS - (time.monotonic() - stopped_at),
            )
            first_note = time.monotonic() - stopped_at
            time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped_at)))  # the outage itself
            assert all(ready(port)[0] == 503 for port in ports), "the database is still down"

            private_pg.start()
            started_at = time.monotonic()
            until(
                lambda: (
                    all(len(tg.bot_messages(c)) == 2 for c in CHATS)
                    and all(m.text.endswith("and that is all") for c in CHATS for m in tg.bot_messages(c))
                ),
                seconds=90,
                progress=lambda: [tg.bot_texts(c) for c in CHATS],
            )
            recovered = time.monotonic() - started_at
            for port in ports:
                until(lambda port=port: ready(port)[0] == 200, seconds=10)
                assert health(port)["agent"] == "ready"
                assert component_up(port, "database") == 1 and component_up(port, "agent") == 1
            time.sleep(2)  # a second answer, if any, would land now
            assert all(proc.poll() is None for _port, proc in running), "no service may have restarted"
            interrupted = [
                m for c in CHATS for m in tg.bot_messages(c) if any(RETRY_NOTE in v for v in m.history)
            ]
        finally:
            outputs = [stop(proc) for _port, proc in running]
    for chat in CHATS:
        assert tg.bot_texts(chat) == [
            f"echo: before {chat} and that is all",
            f"echo: during {chat} and that is all",
        ], outputs
    assert interrupted, "no turn was interrupted by the outage: the test did not test the retry"
    for output in outputs:
        assert "Something went wrong" not in output
        assert "cluster: LISTEN connection open again" in output
    print(
        f"{instances} instance(s): {len(interrupted)} turn(s) showed the retry note, the first "
        f"{first_note:.1f} s into the outage; every message answered {recovered:.1f} s after PostgreSQL "
        "was back"
    )


QUEUED_QUERIES = 8


@pytest.mark.timeout(120)
async def test_checkpoint_queries_queued_when_postgresql_stops_all_fail_within_seconds(private_pg):
    """The checkpointer runs its queries one at a time (one lock per saver) and asks for a connection
    inside that lock. When PostgreSQL stops, the queries queued by running turns must all fail within
    seconds, so that each turn stops and shows the retry note while the outage lasts; before, each
    waited the pool's 5 s in turn (eight queued: 40 s). Once the server is back, the next query works."""
    async with AsyncExitStack() as stack:
        store = CheckpointStore(private_pg.url, None, stack)
        saver = await store.open()
        threads = [f"outage-{n}" for n in range(QUEUED_QUERIES)]
        for thread in threads:
            await saver.aput(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
            )

        private_pg.stop()
        started = time.monotonic()
        results = await asyncio.gather(
            *(saver.aget_tuple({"configurable": {"thread_id": t}}) for t in threads), return_exceptions=True
        )
        took = time.monotonic() - started
        assert all(isinstance(r, Exception) and is_storage_error(r) for r in results), results
        # The first waits the pool's timeout; the rest fail at once behind it (not 5 s each).
        assert took < CHECKPOINT_CONNECT_TIMEOUT_SECONDS + 6, (
            f"{QUEUED_QUERIES} queued queries took {took:.1f} s"
        )

        private_pg.start()
        back = time.monotonic()
        while True:
            try:
                found = await saver.aget_tuple({"configurable": {"thread_id": threads[0]}})
                break
            except Exception as exc:
                assert is_storage_error(exc), exc
                assert time.monotonic() - back < 15, "the checkpointer did not reconnect"
                await asyncio.sleep(0.2)
        assert found is not None
    print(
        f"{QUEUED_QUERIES} queued checkpoint queries failed {took:.1f} s after PostgreSQL stopped; "
        f"one worked {time.monotonic() - back:.1f} s after it was back"
    )
