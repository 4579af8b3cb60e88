"""Two Switchboard instances on one PostgreSQL database share the work (issue 17).

Each instance is a whole in-process ``Service`` with its own engine, inbox, bus, claim loop, heartbeat
and LISTEN connection; both run in this test's event loop. The platform is the memory channel, shared
the way one chat platform is shared by two connections of one app: both instances hear messages (each
is delivered to one of them, alternately) and both post into the same chats, so "answered once" and
"one visible reply" are checked across the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections import Counter, defaultdict
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from agent.goals import EVALUATOR_MARKER
from bot.cluster import InstanceIdInUse
from bot.db import Database
from channels.memory import MemoryChannel
from channels.resume import ReplyState
from tests.agent.helpers import everything_shown, system_text
from tests.conftest import fresh_pg_database, make_settings
from tests.fakes.openai_server import Reply, ToolCall, echo_reply, last_user_text
from tests.fakes.tcp_proxy import StallingProxy
from tests.harness import Harness

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def shared_platform(first: MemoryChannel, second: MemoryChannel) -> None:
    """One platform seen by two connections: the same chats and message ids; ``calls`` stay per instance."""
    second.messages = first.messages
    second.finished = first.finished
    second._ids = first._ids
    second._msg_ids = first._msg_ids
    second.file_store = first.file_store


async def until(predicate: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


def sends(channel: MemoryChannel) -> int:
    return sum(1 for call in channel.calls if call[0] == "send")


def instance(tmp_path, llm, url: str, name: str, turns: int = 4, **cluster: Any) -> Harness:  # type: ignore[no-untyped-def]
    settings = make_settings(
        tmp_path / name,
        llm,
        database={"url": url},
        cluster={"instance_id": f"instance-{name}", **cluster},
        bus={"max_concurrent_turns": turns},
    )
    return Harness(settings, channels={"memory": MemoryChannel("memory")})


def slow_echo(delay: float, chunk_size: int = 8) -> Any:
    def reply(body: dict[str, Any]) -> Reply:
        echoed = echo_reply(body)
        return Reply(text=echoed.text, chunk_size=chunk_size, delay=delay)

    return reply


async def test_two_instances_answer_every_message_once_in_order_and_both_work(tmp_path, llm):
    llm.default_reply = slow_echo(0.02)
    async with fresh_pg_database() as url:
        a, b = instance(tmp_path, llm, url, "a"), instance(tmp_path, llm, url, "b")
        shared_platform(a.chat, b.chat)
        await a.start()
        await b.start()
        try:
            sent: dict[str, list[str]] = defaultdict(list)
            for n in range(60):
                chat = f"chat-{n % 12}"
                message = a.chat.make_message(f"m{n}", chat=chat, message_id=f"p{n}")
                sent[chat].append(message.platform_message_id)
                await (a.chat if n % 2 == 0 else b.chat).deliver(message)
            # A redelivery of every tenth message, to the *other* instance, while it may still run.
            for n in range(0, 60, 10):
                again = a.chat.make_message(f"m{n}", chat=f"chat-{n % 12}", message_id=f"p{n}")
                assert await (b.chat if n % 2 == 0 else a.chat).deliver(again) is False
            await until(lambda: len(a.chat.finished) >= 60)
            await asyncio.sleep(1)  # a second answer, if any, would land now
        finally:
            await a.stop()
            await b.stop()
    assert Counter(a.chat.finished) == Counter({f"p{n}": 1 for n in range(60)})
    position = {pid: i for i, pid in enumerate(a.chat.finished)}
    for chat, ids in sent.items():
        assert sorted(ids, key=position.__getitem__) == ids, f"{chat} answered out of order"
    finals = sorted(m.text for m in a.chat.messages.values())
    assert finals == sorted(f"echo: m{n}" for n in range(60))
    assert sends(a.chat) > 0 and sends(b.chat) > 0, "both instances must have done work"


async def crashed_mid_turn(
    tmp_path, llm, url: str, *, holder: str, claim_seconds: float
) -> tuple[MemoryChannel, str]:  # type: ignore[no-untyped-def]
    """The database rows a kill -9 mid-turn leaves behind: a pending entry with its saved reply
    reference (the placeholder, already in the chat) and ``holder``'s claim on its conversation,
    valid for ``claim_seconds`` more. Returns the chat and the placeholder's reference."""
    from bot.inbox import Inbox

    first = instance(tmp_path, llm, url, "setup")
    await first.start()  # the schema
    await first.stop()
    chat = first.chat
    placeholder = await chat.reply_transport(chat.make_message("x")).send("…")
    message = chat.make_message("survive this", chat="crashed", message_id="c1")
    db = Database(url)
    inbox = Inbox(db)
    await inbox.start()
    entry = await inbox.accept(message)
    await inbox.save_reply_ref(entry.id, ReplyState.first_only(placeholder))
    await inbox.close()
    async with db.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO cluster_claims (key, entry_id, holder, expires) "
                "VALUES (:key, :id, :holder, EXTRACT(EPOCH FROM clock_timestamp()) + :seconds)"
            ),
            {
                "key": "conv:" + "/".join(message.conversation_key),
                "id": entry.id,
                "holder": holder,
                "seconds": claim_seconds,
            },
        )
    await db.close()
    return chat, placeholder


async def test_a_lapsed_claim_is_taken_over_and_its_placeholder_becomes_the_one_answer(tmp_path, llm):
    """An instance died mid-turn (its claim and heartbeat stopped, its placeholder is in the chat).

    The dead instance is written as the database rows a kill -9 leaves behind: a pending entry with
    its saved reply reference, and a claim by an instance whose heartbeat stopped.
    """
    async with fresh_pg_database() as url:
        chat, placeholder = await crashed_mid_turn(
            tmp_path, llm, url, holder="instance-dead", claim_seconds=3
        )
        survivor = instance(tmp_path, llm, url, "b", claim_ttl_seconds=3, poll_seconds=0.5)
        shared_platform(chat, survivor.chat)
        await survivor.start()
        try:
            await asyncio.sleep(1)
            assert chat.finished == [], "the claim has not lapsed yet: nobody may take it over"
            await until(lambda: chat.finished == ["c1"], seconds=20)
            await asyncio.sleep(1)
            assert await survivor.service.inbox.counts() == {"done": 1}
        finally:
            await survivor.stop()
    assert chat.finished == ["c1"]
    [visible] = chat.in_chat("crashed") + [m for m in chat.messages.values() if m.ref == placeholder]
    assert visible.ref == placeholder and visible.text == "echo: survive this"
    assert len(llm.completions) == 1


async def test_stop_sent_through_one_instance_stops_the_turn_running_on_the_other(tmp_path, llm):
    llm.default_reply = lambda body: Reply(text="a very long answer " * 40, chunk_size=2, delay=0.05)
    async with fresh_pg_database() as url:
        # b runs one turn at a time and claims nothing ahead, so while it streams /stop lands on a.
        a = instance(tmp_path, llm, url, "a")
        b = instance(tmp_path, llm, url, "b", turns=1, claim_ahead=0)
        shared_platform(a.chat, b.chat)
        await b.start()
        try:
            await b.chat.say("write an essay", chat="long", message_id="e1")
            await until(lambda: any(m.text.startswith("a very") for m in b.chat.in_chat("long")))
            await a.start()
            await a.chat.say("/stop", chat="long", message_id="e2")
            await until(lambda: "e1" in a.chat.finished and "e2" in a.chat.finished, seconds=20)
        finally:
            await a.stop()
            await b.stop()
    texts = [m.text for m in a.chat.in_chat("long")]
    assert "Stopping the current reply." in texts
    assert any(call[2] == "Stopping the current reply." for call in a.chat.calls), "a answered the /stop"
    assert not any(call[2] == "Stopping the current reply." for call in b.chat.calls)
    assert any(t.endswith("⏹ Stopped.") for t in texts), texts
    assert not any(t.startswith("Nothing is running") for t in texts)


async def test_health_and_doctor_list_the_cluster_instances(tmp_path, llm, capsys):
    from bot.doctor import run_doctor

    async with fresh_pg_database() as url:
        a, b = instance(tmp_path, llm, url, "a"), instance(tmp_path, llm, url, "b")
        await a.start()
        await b.start()
        try:
            health = await a.service.health()
            await run_doctor(b.settings)
        finally:
            await a.stop()
            await b.stop()
    assert health["cluster"]["instance"] == "instance-a"
    assert [m["id"] for m in health["cluster"]["instances"]] == ["instance-a", "instance-b"]
    assert (
        "cluster: 2 instance(s) running: instance-a (0 claimed), instance-b (0 claimed)"
        in capsys.readouterr().out
    )


async def test_an_instance_whose_claim_was_taken_over_stops_its_copy_of_the_turn(tmp_path, llm, caplog):
    """Fencing: this instance was paused past the TTL and another one took the turn over.

    The takeover is written as the row the other instance's claim pass writes (the holder changes).
    """
    llm.default_reply = lambda body: Reply(text="a very long answer " * 40, chunk_size=2, delay=0.05)
    async with fresh_pg_database() as url:
        a = instance(tmp_path, llm, url, "a", claim_ttl_seconds=1.5, poll_seconds=0.5)
        await a.start()
        try:
            await a.chat.say("write an essay", chat="fenced", message_id="f1")
            await until(lambda: any(m.text.startswith("a very") for m in a.chat.in_chat("fenced")))
            async with a.service.db.engine.begin() as conn:
                await conn.execute(
                    text(
                        "UPDATE cluster_claims SET holder = 'instance-other', "
                        "expires = EXTRACT(EPOCH FROM clock_timestamp()) + 600 WHERE holder = 'instance-a'"
                    )
                )
            await until(lambda: "lost the claim" in caplog.text, seconds=10)
            shown = [m.text for m in a.chat.in_chat("fenced")]
            await asyncio.sleep(1)
            assert [m.text for m in a.chat.in_chat("fenced")] == shown, "the stopped copy kept streaming"
            assert a.chat.finished == []
            assert await a.service.inbox.counts() == {"pending": 1}  # the other instance finishes it
        finally:
            await a.stop()


async def test_a_lease_is_held_once_moves_when_it_lapses_and_fences_the_former_holder():
    from bot import approvals, cluster, inbox, migrations, threads

    async with fresh_pg_database() as url:
        db = Database(url)
        try:
            # The schema's upgrade steps expect the service's own tables beside the cluster's.
            await db.create_schema(
                [cluster.metadata, inbox.metadata, threads.metadata, approvals.metadata, migrations.metadata]
            )
            first = cluster.Lease(db, "channel:telegram", "instance-a", ttl=1)
            second = cluster.Lease(db, "channel:telegram", "instance-b", ttl=1)
            assert await first.acquire() and first.token == 1
            assert not await second.acquire(), "held by a: nobody else may take it"
            assert await first.renew()
            assert await second.current() == ("instance-a", 1)
            await asyncio.sleep(1.3)  # a stops renewing (dead or paused)
            assert await second.acquire() and second.token == 2
            assert not await first.renew(), "a's renewal with its old token must fail"
            assert not await first.acquire()
            await second.release()
            assert await second.current() is None
            assert await first.acquire() and first.token == 3
        finally:
            await db.close()


def telegram_instance(  # type: ignore[no-untyped-def]
    tmp_path, llm, url: str, tg: Any, name: str, telegram: dict[str, Any] | None = None, **cluster: Any
) -> Harness:
    from channels.telegram.channel import TelegramChannel
    from tests.channels.telegram.conftest import telegram_config

    settings = make_settings(
        tmp_path / name,
        llm,
        database={"url": url},
        cluster={"instance_id": f"instance-{name}", **cluster},
    )
    channel = TelegramChannel(telegram_config(tg, **(telegram or {})), settings=settings)
    return Harness(settings, channels={"telegram": channel})  # type: ignore[dict-item]


def conflicts(tg: Any) -> int:
    return sum(1 for call in tg.calls("getUpdates") if call["status"] == 409)


async def test_only_the_telegram_lease_holder_polls_and_one_whose_lease_moved_stops_at_once(
    tmp_path, llm, caplog
):
    """Two instances, one bot token: the first up holds ``channel:telegram`` and polls; the other only
    replies. The lease is then moved away (what a takeover after a pause looks like): the holder stops
    polling at once, nobody polls while the foreign lease lasts, and after it lapses polling resumes and
    what was sent meanwhile is answered once."""
    from tests.fakes.telegram import FakeTelegram

    caplog.set_level(logging.INFO, logger="bot.leases")
    with FakeTelegram(bot_username="switchboard_bot", long_poll_cap=0.5) as tg:
        async with fresh_pg_database() as url:
            a = telegram_instance(tmp_path, llm, url, tg, "a", lease_ttl_seconds=1.5)
            b = telegram_instance(tmp_path, llm, url, tg, "b", lease_ttl_seconds=1.5)
            await a.start()
            await b.start()
            try:
                health_a, health_b = await a.service.health(), await b.service.health()
                assert health_a["cluster"]["leases"] == [{"name": "channel:telegram", "token": 1}]
                assert health_b["cluster"]["leases"] == []
                assert "replies only" in health_b["channels"]["telegram"]["detail"]
                for n in range(6):
                    tg.user_message(40 + n % 3, f"first {n}")
                for n in range(6):
                    await tg.wait_for_bot_text(40 + n % 3, f"echo: first {n}")
                await asyncio.sleep(1)  # a few long polls of the holder, none overlapping another
                assert conflicts(tg) == 0, "two instances polled at once"

                async with a.service.db.engine.begin() as conn:
                    await conn.execute(
                        text(
                            "UPDATE cluster_leases SET holder = 'instance-other', token = token + 1, "
                            "expires = EXTRACT(EPOCH FROM clock_timestamp()) + 4"
                        )
                    )
                await until(lambda: "lease channel:telegram lost" in caplog.text, seconds=5)
                lost_at = time.time()
                tg.user_message(50, "sent while nobody polls")
                await asyncio.sleep(1.2)
                polled = [c for c in tg.calls("getUpdates") if c["at"] > lost_at + 0.1]
                assert polled == [], "an instance polled without holding the lease"
                assert tg.bot_messages(50) == []
                await tg.wait_for_bot_text(50, "echo: sent while nobody polls", timeout=10)
                holders = [
                    (await h.service.health())["cluster"]["leases"] for h in (a, b) if h.service.leases
                ]
                assert sorted(len(leases) for leases in holders) == [0, 1]
                assert [lease["token"] for leases in holders for lease in leases] == [3]
                await asyncio.sleep(0.5)
            finally:
                await a.stop()
                await b.stop()
        assert tg.bot_texts(50) == ["echo: sent while nobody polls"]
        for n in range(3):
            assert tg.bot_texts(40 + n) == [f"echo: first {n}", f"echo: first {n + 3}"]
    assert "acquired (token 3)" in caplog.text


def discord_instance(tmp_path, llm, url: str, fake: Any, name: str, **cluster: Any) -> Harness:  # type: ignore[no-untyped-def]
    from channels.discord.channel import DiscordChannel
    from tests.channels.discord.conftest import discord_config

    settings = make_settings(
        tmp_path / name,
        llm,
        database={"url": url},
        cluster={"instance_id": f"instance-{name}", **cluster},
    )
    channel = DiscordChannel(discord_config(fake), settings=settings)
    return Harness(settings, channels={"discord": channel})  # type: ignore[dict-item]


async def test_the_discord_gateway_is_connected_once_and_moves_with_its_lease(tmp_path, llm):
    """Every session of the fake gets every message (as two sessions of one bot do), so only the lease
    holder connects. A holder whose lease moved closes its session; a holder that stops hands the lease
    on; each time the new holder's READY reads back what was sent while no session was open, and every
    DM is answered once."""
    from tests.channels.discord.conftest import USER_ID
    from tests.fakes.discord import FakeDiscord

    with FakeDiscord() as fake:
        dm = fake.new_id()

        def texts() -> list[str]:
            return [m.text for m in fake.in_channel(dm)]

        async with fresh_pg_database() as url:
            a = discord_instance(tmp_path, llm, url, fake, "a", lease_ttl_seconds=1.5)
            b = discord_instance(tmp_path, llm, url, fake, "b", lease_ttl_seconds=1.5)
            await a.start()
            await b.start()
            try:
                await until(lambda: fake.connected == 1, seconds=20)
                assert (await a.service.health())["cluster"]["leases"] == [
                    {"name": "channel:discord", "token": 1}
                ]
                assert "replies only" in (await b.service.health())["channels"]["discord"]["detail"]
                fake.message_create(dm, USER_ID, "hello")
                await until(lambda: texts() == ["echo: hello"], seconds=20)

                async with a.service.db.engine.begin() as conn:  # a was paused past the TTL
                    await conn.execute(
                        text(
                            "UPDATE cluster_leases SET holder = 'instance-other', token = token + 1, "
                            "expires = EXTRACT(EPOCH FROM clock_timestamp()) + 2"
                        )
                    )
                await until(lambda: fake.connected == 0, seconds=5)
                fake.message_create(dm, USER_ID, "while fenced")
                await until(lambda: fake.connected == 1, seconds=10)
                await until(lambda: texts() == ["echo: hello", "echo: while fenced"], seconds=20)

                holder, other = (a, b) if (await a.service.health())["cluster"]["leases"] else (b, a)
                await holder.stop()
                fake.message_create(dm, USER_ID, "while moving")
                await until(lambda: len(texts()) == 3, seconds=20)
                assert (await other.service.health())["cluster"]["leases"] == [
                    {"name": "channel:discord", "token": 4}
                ]
                await asyncio.sleep(0.5)
                assert fake.connected == 1
            finally:
                await a.stop()
                await b.stop()
        assert texts() == ["echo: hello", "echo: while fenced", "echo: while moving"]


async def test_a_telegram_holder_that_cannot_renew_its_lease_in_time_stops_polling_until_it_can(
    tmp_path, llm, caplog
):
    """The lease row is locked by another session (what a stuck database looks like to the holder):
    renewals hang, and before the lease could lapse the holder stops polling. Once the database
    answers again it takes the lease back and answers what was sent meanwhile, once."""
    from tests.fakes.telegram import FakeTelegram

    caplog.set_level(logging.INFO, logger="bot.leases")
    with FakeTelegram(bot_username="switchboard_bot", long_poll_cap=0.5) as tg:
        async with fresh_pg_database() as url:
            a = telegram_instance(tmp_path, llm, url, tg, "a", lease_ttl_seconds=1.5)
            await a.start()
            try:
                tg.user_message(60, "before")
                await tg.wait_for_bot_text(60, "echo: before")
                async with a.service.db.engine.connect() as blocker:
                    await blocker.execute(text("SELECT 1 FROM cluster_leases FOR UPDATE"))
                    await until(lambda: "could not be renewed in time" in caplog.text, seconds=10)
                    stopped_at = time.time()
                    tg.user_message(60, "while stuck")
                    await asyncio.sleep(1.5)
                    polled = [c for c in tg.calls("getUpdates") if c["at"] > stopped_at + 0.1]
                    assert polled == [], "polled without a lease it could renew"
                    await blocker.rollback()
                await tg.wait_for_bot_text(60, "echo: while stuck", timeout=10)
                assert (await a.service.health())["cluster"]["leases"] == [
                    {"name": "channel:telegram", "token": 1}
                ]
                await asyncio.sleep(0.5)
            finally:
                await a.stop()
        assert tg.bot_texts(60) == ["echo: before", "echo: while stuck"]


def through(proxy: StallingProxy, url: str) -> str:
    """``url`` (a database or HTTP address on 127.0.0.1) reached through ``proxy`` instead."""
    if url.startswith("http"):
        return f"http://127.0.0.1:{proxy.port}"
    return make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)


def proxy_to(url: str) -> StallingProxy:
    """A stalling proxy in front of the server at ``url`` (a database URL or an http:// address)."""
    parsed = urlsplit(url)
    return StallingProxy(parsed.hostname or "127.0.0.1", parsed.port or 5432)


async def lease_row(db: Database) -> tuple[str, int, float]:
    async with db.engine.connect() as conn:
        row = (await conn.execute(text("SELECT holder, token, expires FROM cluster_leases"))).one()
    return str(row[0]), int(row[1]), float(row[2])


async def claims(db: Database) -> int:
    async with db.engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM cluster_claims"))).scalar_one())


async def cursor_saved(db: Database, channel_id: str) -> bool:
    async with db.engine.connect() as conn:
        query = text("SELECT count(*) FROM discord_cursors WHERE channel_id = :c")
        return bool((await conn.execute(query, {"c": channel_id})).scalar_one())


STALL_TTL = 3.0


async def test_a_holder_whose_database_stalls_stops_polling_at_its_lease_end_and_the_other_takes_over(
    tmp_path, llm, caplog
):
    """Instance a reaches PostgreSQL through a proxy that stalls (a database too slow to answer): its
    renewals time out. It must not poll Telegram past its lease — each long poll is cut to end before
    the lease does, and none starts after — so b, which takes the lease when it lapses, polls within the
    TTL without a single 409, and a message sent during the stall is answered. a's /health says it
    receives nothing meanwhile; once the database answers again, a keeps contending and says it stands
    by for b, and later messages are answered once."""
    from tests.fakes.telegram import FakeTelegram

    caplog.set_level(logging.INFO, logger="bot.leases")
    # Long polls of up to 10 s, which the fake honours: only the lease bound keeps a's shorter.
    with FakeTelegram(bot_username="switchboard_bot", long_poll_cap=10) as tg:
        async with fresh_pg_database() as url:
            with proxy_to(url) as db_proxy, proxy_to(tg.url) as tg_proxy:
                a = telegram_instance(
                    tmp_path,
                    llm,
                    through(db_proxy, url),
                    tg,
                    "a",
                    telegram={"poll_timeout_seconds": 10, "api_base_url": through(tg_proxy, tg.url)},
                    lease_ttl_seconds=STALL_TTL,
                )
                b = telegram_instance(
                    tmp_path,
                    llm,
                    url,
                    tg,
                    "b",
                    telegram={"poll_timeout_seconds": 10},
                    lease_ttl_seconds=STALL_TTL,
                )
                a_host = f"127.0.0.1:{tg_proxy.port}"
                await a.start()
                await b.start()
                try:
                    assert (await b.service.health())["channels"]["telegram"]["intake"] == (
                        "not receiving (standby: lease held by instance instance-a)"
                    )
                    assert (await a.service.health())["channels"]["telegram"]["intake"] == "receiving"
                    tg.user_message(80, "before")
                    await tg.wait_for_bot_text(80, "echo: before")

                    db_proxy.stall()
                    stalled_at = time.time()
                    tg.user_message(81, "during the stall")
                    # a's window closes before its lease lapses, and /health (bounded) says so.
                    await until(lambda: not a.service.channels["telegram"].receiving()[0], seconds=STALL_TTL)
                    holder, token, expires = await lease_row(b.service.db)
                    assert (holder, token) == ("instance-a", 1), (
                        "a stopped receiving only after its lease lapsed"
                    )
                    health_a = await a.service.health()
                    assert health_a["channels"]["telegram"]["intake"].startswith("not receiving (lease"), (
                        health_a
                    )
                    # The database check is cached for up to 2 s (bot/probes.py): within that it says so too.
                    deadline = time.monotonic() + 6
                    while health_a["database"] == "ok" and time.monotonic() < deadline:
                        await asyncio.sleep(0.2)
                        health_a = await a.service.health()
                    assert health_a["database"].startswith("no answer within"), health_a

                    await tg.wait_for_bot_text(81, "echo: during the stall", timeout=STALL_TTL + 10)
                    assert await lease_row(b.service.db) == (
                        "instance-b",
                        2,
                        pytest.approx(time.time(), abs=5),
                    )
                    polls = tg.calls("getUpdates")
                    late = [
                        c for c in polls if c["host"] == a_host and c["at"] + c["params"]["timeout"] > expires
                    ]
                    assert late == [], f"a polled past its lease (which ended at {expires:.2f}): {late}"
                    taken_over = min(c["at"] for c in polls if c["host"] != a_host and c["at"] > stalled_at)
                    assert taken_over - stalled_at <= STALL_TTL + 0.5, (
                        f"b polled {taken_over - stalled_at:.1f} s later"
                    )
                    assert conflicts(tg) == 0, "two instances polled at once"

                    db_proxy.resume()
                    await until(
                        lambda: (
                            "standby: lease held by instance instance-b"
                            in a.service.channels["telegram"].health()["intake"]
                        ),
                        seconds=10,
                    )
                    for n in range(4):
                        tg.user_message(82 + n % 2, f"after {n}")
                    for n in range(4):
                        await tg.wait_for_bot_text(82 + n % 2, f"echo: after {n}")
                    assert conflicts(tg) == 0
                finally:
                    db_proxy.resume()
                    await a.stop()
                    await b.stop()
        assert tg.bot_texts(81) == ["echo: during the stall"]
        assert tg.bot_texts(82) == ["echo: after 0", "echo: after 2"]
        assert tg.bot_texts(83) == ["echo: after 1", "echo: after 3"]
    assert "lease channel:telegram could not be renewed in time" in caplog.text


async def test_a_lone_holder_whose_database_stalls_past_its_lease_receives_again_once_it_answers(
    tmp_path, llm, caplog
):
    """One instance, its database stalled for longer than the lease: it stops polling at the lease's end
    and says so in /health, and keeps contending for the lease — so once the database answers it holds
    the lease again (no other instance took it) and answers what was sent meanwhile, within the TTL."""
    from tests.fakes.telegram import FakeTelegram

    with FakeTelegram(bot_username="switchboard_bot", long_poll_cap=10) as tg:
        async with fresh_pg_database() as url:
            with proxy_to(url) as db_proxy:
                a = telegram_instance(
                    tmp_path,
                    llm,
                    through(db_proxy, url),
                    tg,
                    "a",
                    telegram={"poll_timeout_seconds": 10},
                    lease_ttl_seconds=STALL_TTL,
                )
                direct = Database(url)  # the test's own look at the lease row, past the stalled proxy
                await a.start()
                try:
                    tg.user_message(90, "before")
                    await tg.wait_for_bot_text(90, "echo: before")
                    db_proxy.stall()
                    await until(lambda: not a.service.channels["telegram"].receiving()[0], seconds=STALL_TTL)
                    _holder, _token, expires = await lease_row(direct)
                    tg.user_message(90, "during the stall")
                    await asyncio.sleep(STALL_TTL)  # a lease's worth of outage: its renewals keep failing
                    health = await a.service.health()
                    assert health["channels"]["telegram"]["intake"].startswith("not receiving (lease"), health
                    late = [c for c in tg.calls("getUpdates") if c["at"] + c["params"]["timeout"] > expires]
                    assert late == [], f"polled past the lease (which ended at {expires:.2f}): {late}"
                    db_proxy.resume()
                    resumed = time.monotonic()
                    await tg.wait_for_bot_text(90, "echo: during the stall", timeout=STALL_TTL + 10)
                    assert time.monotonic() - resumed <= STALL_TTL, "receiving did not resume within the TTL"
                    assert (await a.service.health())["channels"]["telegram"]["intake"] == "receiving"
                    assert (await a.service.health())["cluster"]["leases"] == [
                        {"name": "channel:telegram", "token": 1}
                    ]
                finally:
                    db_proxy.resume()
                    await a.stop()
                    await direct.close()
        assert tg.bot_texts(90) == ["echo: before", "echo: during the stall"]


async def test_a_discord_holder_whose_database_stalls_closes_its_session_before_the_other_connects(
    tmp_path, llm
):
    """The gateway holder's database stalls: its session closes at its lease's end and the other
    instance connects only after it — never two sessions at once (each would receive every message)
    — and a DM sent after the holder stopped receiving is read back by the new holder and answered once."""
    from tests.channels.discord.conftest import USER_ID
    from tests.fakes.discord import FakeDiscord

    with FakeDiscord() as fake:
        dm = fake.new_id()

        def texts() -> list[str]:
            return [m.text for m in fake.in_channel(dm)]

        async with fresh_pg_database() as url:
            with proxy_to(url) as db_proxy:
                a = discord_instance(
                    tmp_path, llm, through(db_proxy, url), fake, "a", lease_ttl_seconds=STALL_TTL
                )
                b = discord_instance(tmp_path, llm, url, fake, "b", lease_ttl_seconds=STALL_TTL)
                await a.start()
                await b.start()
                sessions: list[int] = []
                watching = True

                async def watch() -> None:
                    while watching:
                        sessions.append(fake.connected)
                        await asyncio.sleep(0.01)

                watcher = asyncio.create_task(watch())
                try:
                    await until(lambda: fake.connected == 1, seconds=20)
                    fake.message_create(dm, USER_ID, "hello")
                    await until(lambda: texts() == ["echo: hello"], seconds=20)
                    # Before the stall, a's claim on the DM's thread is released and its cursor for the DM
                    # is saved (both are written a moment after the answer): this test is about the
                    # gateway's lease, not about a thread claim that lapses after claim_ttl, nor about a
                    # DM the next holder cannot know it should read back.
                    await a.idle()
                    while await claims(b.service.db) or not await cursor_saved(b.service.db, dm):
                        await asyncio.sleep(0.05)
                    db_proxy.stall()
                    await until(lambda: not a.service.channels["discord"].receiving()[0], seconds=STALL_TTL)
                    fake.message_create(dm, USER_ID, "during the stall")
                    await until(
                        lambda: texts() == ["echo: hello", "echo: during the stall"], seconds=STALL_TTL + 20
                    )
                    assert (await b.service.health())["channels"]["discord"]["intake"] == "receiving"
                    db_proxy.resume()
                    await until(
                        lambda: "standby" in a.service.channels["discord"].health()["intake"], seconds=10
                    )
                finally:
                    watching = False
                    await watcher
                    db_proxy.resume()
                    await a.stop()
                    await b.stop()
        assert max(sessions) == 1, "two gateway sessions were open at once"
        assert texts() == ["echo: hello", "echo: during the stall"]


async def test_a_stopping_telegram_holder_hands_its_lease_over_at_once(tmp_path, llm):
    """A rolling restart: the holder stops gracefully. With a 30 s lease the standby would look again
    only after 10 s; the release's NOTIFY makes it take the lease and poll right away."""
    from tests.fakes.telegram import FakeTelegram

    with FakeTelegram(bot_username="switchboard_bot", long_poll_cap=0.5) as tg:
        async with fresh_pg_database() as url:
            a = telegram_instance(tmp_path, llm, url, tg, "a", lease_ttl_seconds=30)
            b = telegram_instance(tmp_path, llm, url, tg, "b", lease_ttl_seconds=30)
            await a.start()
            await b.start()  # b's first look found the lease held: its next is 10 s away
            try:
                await a.stop()
                stopped = time.monotonic()
                tg.user_message(70, "after the restart")
                await tg.wait_for_bot_text(70, "echo: after the restart", timeout=20)
                handed_over = time.monotonic() - stopped
                assert (await b.service.health())["cluster"]["leases"] == [
                    {"name": "channel:telegram", "token": 2}
                ]
            finally:
                await b.stop()
        assert tg.bot_texts(70) == ["echo: after the restart"]
    assert handed_over < 5, f"the standby took {handed_over:.1f} s to take the released lease"


# --- a thread's claim covers its whole lane: queued messages and goal steps ---------------------------


async def test_a_message_sent_while_its_thread_runs_elsewhere_is_queued_there_and_answered_after(
    tmp_path, llm
):
    """As on one instance: the second message of a busy thread shows "⏳ Queued" and that notice becomes
    its answer once the first is done, whichever instance the platform handed the message to."""
    llm.default_reply = slow_echo(0.1, chunk_size=4)
    async with fresh_pg_database() as url:
        a, b = instance(tmp_path, llm, url, "a"), instance(tmp_path, llm, url, "b")
        shared_platform(a.chat, b.chat)
        await a.start()
        try:
            await a.chat.say("tell me a long story about a lighthouse", chat="busy", message_id="q1")
            await until(lambda: any(m.text.startswith("echo") for m in a.chat.in_chat("busy")))
            await b.start()
            await b.chat.say("and then?", chat="busy", message_id="q2")
            await until(lambda: "q1" in a.chat.finished and "q2" in a.chat.finished, seconds=30)
            await asyncio.sleep(0.5)  # a second answer, if any, would land now
        finally:
            await a.stop()
            await b.stop()
    assert a.chat.finished == ["q1", "q2"]
    [first, second] = a.chat.in_chat("busy")
    assert first.text == "echo: tell me a long story about a lighthouse"
    assert second.history[0] == "⏳ Queued — I'll answer after the 1 message(s) ahead of this one."
    assert second.text == "echo: and then?"


async def test_goal_steps_keep_their_thread_so_no_other_instance_answers_in_between(tmp_path, llm):
    """A goal's hidden steps run on the instance that finished the turn before them. Messages sent to
    the thread meanwhile, through the other instance, wait for the running step instead of starting a
    second turn of the same thread beside it: the model never streams two answers of the thread at once,
    and each message is answered once."""
    steps = iter(range(1, 100))

    def reply(body: dict[str, Any]) -> Reply:
        if EVALUATOR_MARKER in system_text(body):
            return Reply(text=json.dumps({"decision": "continue", "reason": "more to tidy"}))
        if last_user_text(body).startswith("[Goal continuation"):
            return Reply(text=f"tidied part {next(steps)}", chunk_size=2, delay=0.05)
        return Reply(text=echo_reply(body).text, chunk_size=2, delay=0.05)

    llm.default_reply = reply
    async with fresh_pg_database() as url:
        a, b = instance(tmp_path, llm, url, "a"), instance(tmp_path, llm, url, "b")
        shared_platform(a.chat, b.chat)
        await a.start()
        await b.start()
        try:
            await a.chat.say("/goal tidy the workspace", chat="goal", message_id="g0")
            await until(  # the goal's task card says its first continuation is on its way
                lambda: any("▶️ Running — step 1 of 8" in t for t in everything_shown(a.chat)), seconds=30
            )
            for n in range(3):
                await b.chat.say(f"question {n}", chat="goal", message_id=f"u{n}")
                await asyncio.sleep(1.0)
            await until(lambda: "Goal paused after 8 continuations" in " ".join(everything_shown(a.chat)), 60)
            await until(lambda: all(f"u{n}" in a.chat.finished for n in range(3)), seconds=30)
            await asyncio.sleep(0.5)
        finally:
            await a.stop()
            await b.stop()
    work = sorted(
        times
        for body, times in zip(llm.completions, llm.completion_times, strict=True)
        if EVALUATOR_MARKER not in system_text(body)
    )
    for (_started, finished), (next_started, _) in itertools.pairwise(work):
        assert finished is not None and finished <= next_started, "two turns of one thread streamed at once"
    finals = [m.text for m in a.chat.in_chat("goal")]
    for n in range(3):
        assert finals.count(f"echo: question {n}") == 1, finals


# --- one id, one running instance ---------------------------------------------------------------------


async def test_a_second_instance_with_a_running_instances_id_is_refused(tmp_path, llm):
    async with fresh_pg_database() as url:
        a = instance(tmp_path, llm, url, "a", claim_ttl_seconds=3)
        twin = instance(tmp_path, llm, url, "twin", instance_id="instance-a", claim_ttl_seconds=3)
        await a.start()
        try:
            with pytest.raises(
                InstanceIdInUse, match=r"cluster\.instance_id .instance-a. is in use by a running"
            ):
                await twin.start()
            await a.chat.say("still here?", chat="c", message_id="m1")
            await until(lambda: a.chat.finished == ["m1"], seconds=20)
        finally:
            with contextlib.suppress(Exception):
                await twin.stop()
            await a.stop()
    assert [m.text for m in a.chat.in_chat("c")] == ["echo: still here?"]


async def test_a_restart_under_the_same_id_after_a_crash_runs_the_dead_processs_turn_at_once(tmp_path, llm):
    """kill -9, then the same instance (a fixed ``instance_id``) starts again a second later: the rows
    the dead process left — a pending entry with its placeholder, a claim still valid for a minute and a
    fresh heartbeat from another pid — must not make the new process renew the claim for ever (the turn
    would never run); it sees the old process is gone and runs the turn in the same placeholder."""
    async with fresh_pg_database() as url:
        chat, placeholder = await crashed_mid_turn(tmp_path, llm, url, holder="instance-a", claim_seconds=60)
        db = Database(url)
        async with db.engine.begin() as conn:  # and its heartbeat, a second old, from another pid
            now = "EXTRACT(EPOCH FROM clock_timestamp())"
            await conn.execute(
                text(
                    "INSERT INTO cluster_instances (id, host, pid, started_at, heartbeat_at) VALUES "
                    f"('instance-a', 'old-host', 4242, {now} - 100, {now} - 1)"
                )
            )
        await db.close()
        again = instance(tmp_path, llm, url, "a", claim_ttl_seconds=3, poll_seconds=0.5)
        shared_platform(chat, again.chat)
        await again.start()
        try:
            await until(lambda: chat.finished == ["c1"], seconds=15)  # the old claim had 60 s left
            await asyncio.sleep(1)
        finally:
            await again.stop()
    assert chat.finished == ["c1"]
    assert chat.messages[placeholder].text == "echo: survive this"  # the placeholder became the answer


async def test_a_new_conversation_behind_a_long_backlog_of_a_busy_thread_is_answered_at_once(tmp_path, llm):
    """More pending messages than one page of a look for work (500), all in one thread that another
    instance runs one at a time: a new conversation's message, newer than every one of them, is
    answered by the idle instance right away instead of after the whole backlog."""
    from bot.cluster import SCAN_LIMIT
    from bot.inbox import Inbox

    def reply(body: dict[str, Any]) -> Reply:
        text = echo_reply(body).text
        return Reply(text=text, chunk_size=2, delay=0.2 if "backlog" in text else 0.01)

    llm.default_reply = reply
    async with fresh_pg_database() as url:
        first = instance(tmp_path, llm, url, "setup")
        await first.start()  # the schema
        await first.stop()
        db = Database(url)
        inbox = Inbox(db)
        await inbox.start()
        for n in range(SCAN_LIMIT + 100):
            await inbox.accept(first.chat.make_message(f"backlog {n}", chat="busy", message_id=f"b{n}"))
        await inbox.close()
        await db.close()
        busy = instance(tmp_path, llm, url, "busy", turns=1, claim_ahead=0)
        idle = instance(tmp_path, llm, url, "idle")
        shared_platform(busy.chat, idle.chat)
        await busy.start()
        try:
            await until(lambda: any(m.text.startswith("echo: backlog") for m in busy.chat.in_chat("busy")))
            await idle.start()
            await idle.chat.say("hello there", chat="new", message_id="n1")
            await until(lambda: "n1" in idle.chat.finished, seconds=15)
        finally:
            await idle.stop()
            await busy.stop(grace=0)
    assert [m.text for m in idle.chat.in_chat("new")] == ["echo: hello there"]
    assert busy.chat.finished.index("n1") < 10, "the new message waited for the backlog"


async def test_a_starting_instance_leaves_an_approval_another_instance_waits_on(tmp_path, llm):
    """b's turn waits for /approve when a starts: a's start-up sweep of leftover requests (a dead
    process's) must not close b's live one, so b's request runs its own course (here: its timeout)."""
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "rm -rf /mnt/user-data/workspace/build"})]),
        Reply(text="went on without it"),
    )
    async with fresh_pg_database() as url:
        harnesses = {}
        for name in ("a", "b"):
            settings = make_settings(
                tmp_path / name,
                llm,
                database={"url": url},
                cluster={"instance_id": f"instance-{name}"},
                sandbox={"mode": "host", "approval_timeout_seconds": 4},
            )
            harnesses[name] = Harness(settings, channels={"memory": MemoryChannel("memory")})
        a, b = harnesses["a"], harnesses["b"]
        shared_platform(a.chat, b.chat)
        await b.start()
        try:
            await b.chat.say("clean up the build", chat="ops", message_id="c1")
            await until(
                lambda: any("🔐 Approval needed" in m.text for m in b.chat.in_chat("ops")), seconds=30
            )
            await a.start()  # its start-up looks for leftover requests
            await until(
                lambda: any("went on without it" in m.text for m in b.chat.in_chat("ops")), seconds=30
            )
        finally:
            await a.stop()
            await b.stop()
    texts = [m.text for m in b.chat.in_chat("ops")]
    assert not any("the bot restarted before it was answered" in t for t in texts), texts
    assert any("expired; the command did not run" in t for t in texts), texts
