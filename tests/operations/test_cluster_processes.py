"""Two real ``serve`` processes on one PostgreSQL database, fed by GitHub webhooks (issue 17).

GitHub delivers each webhook to one URL; behind a load balancer that is any instance, so the test
posts signed deliveries alternately to both. Replies go to the fake GitHub API, which both instances
call, so "answered once" and "one visible comment" are checked where a user would look.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import yaml
from sqlalchemy.engine import make_url

from tests.fakes.github import FakeGitHub
from tests.fakes.openai_server import Reply, echo_reply
from tests.fakes.tcp_proxy import StallingProxy
from tests.fakes.telegram import FakeTelegram
from tests.foundation.test_cli import free_port
from tests.github.conftest import APP_ID, BOT, REPO, SECRET, _key_pair, comment_payload
from tests.operations.test_instances import fresh_pg_database, serve, stop  # noqa: F401 (fixture)
from webhooks.signature import sign

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub(app_id=APP_ID, public_key_pem=_key_pair()[1], bot_login=f"{BOT}[bot]") as server:
        yield server  # type: ignore[misc]


def write_config(tmp_path: Path, name: str, llm_url: str, github_url: str, database_url: str) -> Path:
    key = tmp_path / "app-private-key.pem"
    key.write_bytes(_key_pair()[0])
    config = {
        "data_dir": str(tmp_path / f"data-{name}"),
        "database": {"url": database_url},
        "models": [
            {
                "name": "default",
                "model": "fake-model",
                "api_key": "$FAKE_KEY",
                "base_url": llm_url,
                "max_retries": 0,
            }
        ],
        "memory": {"enabled": False},
        "cluster": {"instance_id": name, "claim_ttl_seconds": 3, "poll_seconds": 1},
        "channels": {
            "github": {
                "enabled": True,
                "webhook_secret": SECRET,
                "app_id": APP_ID,
                "private_key_path": str(key),
                "api_base_url": github_url,
                "edit_interval_seconds": 0.05,
                "agents": [
                    {
                        "name": "reviewer",
                        "bot_login": BOT,
                        "system_prompt": "You review code.",
                        "bindings": [{"repo": REPO}],
                    }
                ],
            }
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def health(port: int) -> dict[str, Any]:
    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()  # type: ignore[no-any-return]


def wait_ready(port: int, proc: Any, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.output())
        try:
            if health(port).get("agent") == "ready":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("serve did not become ready")


def until(predicate: Any, seconds: float = 60, progress: Any = None) -> None:
    """Wait for ``predicate``; on timeout say where things stood (``progress()``), so a slow run can be
    told from a stuck one."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            where = f": {progress()}" if progress is not None else ""
            raise AssertionError(f"condition not reached in {seconds:g} s{where}")
        time.sleep(0.1)


def deliver(port: int, data: dict[str, Any]) -> httpx.Response:
    body = json.dumps(data).encode()
    headers = {
        "X-GitHub-Event": "issue_comment",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-GitHub-Hook-ID": "1",
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/test",
        "X-Hub-Signature-256": sign(SECRET, body),
    }
    return httpx.post(
        f"http://127.0.0.1:{port}/api/webhooks/github", content=body, headers=headers, timeout=10
    )


def start_two(tmp_path: Path, llm: Any, github: FakeGitHub, url: str) -> list[tuple[int, Any]]:
    running = []
    for name in ("p1", "p2"):
        port = free_port()
        proc = serve(write_config(tmp_path, name, llm.base_url, github.url, url), port)
        running.append((port, proc))
    for port, proc in running:
        wait_ready(port, proc)
    return running


def test_two_serve_processes_answer_every_comment_once_in_order_and_a_kill_9_moves_a_turn_to_the_other(
    tmp_path,
    llm,
    github,
    fresh_pg_database,  # noqa: F811 (the fixture imported above)
):
    """Comments posted alternately to both instances are each answered once, in order per issue, and
    both instances run turns. Then the instance running a long answer is killed: the other takes the
    turn over and finishes it in the same comment."""

    state = {"crash_delay": 0.15}

    def reply(body: dict[str, Any]) -> Reply:
        text = echo_reply(body).text
        if "survive a crash" in text:
            return Reply(text=text + " and a long tail" * 10, chunk_size=4, delay=state["crash_delay"])
        return Reply(text=text, delay=0.02)

    llm.default_reply = reply
    running = start_two(tmp_path, llm, github, fresh_pg_database)
    issues, per_issue = list(range(501, 511)), 3
    outputs: list[str] = []
    try:
        n = 0
        for round_ in range(per_issue):
            for issue in issues:
                port = running[n % 2][0]
                response = deliver(
                    port, comment_payload(f"@{BOT} question {round_} on {issue}", number=issue)
                )
                assert response.status_code in (200, 202), response.text
                n += 1
        until(lambda: all(len(github.comments_on(REPO, i)) >= per_issue for i in issues), seconds=120)
        until(
            lambda: all("question" in c.body for i in issues for c in github.comments_on(REPO, i)), seconds=60
        )
        time.sleep(2)  # a second answer, if any, would land now
        members = health(running[0][0])["cluster"]["instances"]
        ran_turns = [proc.output().count("turn finished") for _port, proc in running]

        # kill -9 of the instance running a turn
        assert deliver(running[0][0], comment_payload(f"@{BOT} survive a crash", number=700)).status_code in (
            200,
            202,
        )
        until(lambda: any(health(port)["cluster"]["claims"] for port, _ in running), seconds=30)
        runner = next(i for i, (port, _) in enumerate(running) if health(port)["cluster"]["claims"])
        until(lambda: any("survive" in c.body for c in github.comments_on(REPO, 700)), seconds=30)
        running[runner][1].send_signal(signal.SIGKILL)
        running[runner][1].wait(timeout=30)
        killed_at = time.monotonic()
        state["crash_delay"] = 0.01  # the re-run need not be slow
        [at_kill] = github.comments_on(REPO, 700)
        versions = len(at_kill.history)
        until(lambda: len(github.comments_on(REPO, 700)[0].history) > versions, seconds=30)
        took_over = time.monotonic() - killed_at
        until(
            lambda: any(c.body.endswith("and a long tail") for c in github.comments_on(REPO, 700)), seconds=60
        )
        took = time.monotonic() - killed_at
        time.sleep(2)
    finally:
        outputs = [stop(proc) for _port, proc in running]
    assert sorted(m["id"] for m in members) == ["p1", "p2"]
    for issue in issues:
        comments = sorted(github.comments_on(REPO, issue), key=lambda c: c.id)
        assert len(comments) == per_issue, [c.body for c in comments]
        for round_, comment in enumerate(comments):
            assert f"question {round_} on {issue}" in comment.body, "answered out of order"
    assert min(ran_turns) > 0, f"both instances must have run turns: {ran_turns}"
    survivor_output = outputs[1 - runner]
    assert "Traceback" not in survivor_output, survivor_output
    [comment] = github.comments_on(REPO, 700)  # the placeholder became the answer: one comment
    assert comment.body.endswith("and a long tail")
    assert "took over inbox entry" in survivor_output
    print(
        f"failover: kill -9 → survivor edits the comment after {took_over:.1f} s, answer done after {took:.1f} s"
    )


# --- Telegram long polling under a lease -------------------------------------------------------------

LEASE_TTL = 3.0


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    # A real Bot API answers 409 Conflict to the older of two getUpdates running at once; so does this.
    with FakeTelegram(bot_username="switchboard_bot", long_poll_cap=1.0) as server:
        yield server  # type: ignore[misc]


def write_telegram_config(
    tmp_path: Path,
    name: str,
    llm_url: str,
    tg: FakeTelegram,
    database_url: str,
    telegram: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    config: dict[str, Any] = {
        "data_dir": str(tmp_path / f"data-{name}"),
        "database": {"url": database_url},
        "models": [{"name": "default", "model": "fake-model", "api_key": "$FAKE_KEY", "base_url": llm_url}],
        "memory": {"enabled": False},
        "cluster": {
            "instance_id": name,
            "claim_ttl_seconds": 3,
            "poll_seconds": 1,
            "lease_ttl_seconds": LEASE_TTL,
            **(cluster or {}),
        },
        "channels": {
            "telegram": {
                "enabled": True,
                "bot_token": tg.token,
                "bot_username": "switchboard_bot",
                "api_base_url": tg.url,
                "poll_timeout_seconds": 1,
                "edit_interval_seconds": 0.1,
                "private_drafts": False,  # the reply is one message edited in place
                "trust": {"members": ["*"]},  # the test's users are members
                **(telegram or {}),
            }
        },
        **extra,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def launch_telegram_instance(
    tmp_path: Path, name: str, llm: Any, tg: FakeTelegram, url: str
) -> tuple[int, Any]:
    port = free_port()
    return port, serve(write_telegram_config(tmp_path, name, llm.base_url, tg, url), port)


def leases_once_open(port: int, proc: Any) -> list[str]:
    """The leases an instance holds once its channels started (``serve`` answers /health before)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.output())
        with contextlib.suppress(httpx.HTTPError, KeyError):
            answer = health(port)
            if answer["channels"]["telegram"]["state"] == "connected":
                return [lease["name"] for lease in answer["cluster"]["leases"]]
        time.sleep(0.1)
    raise AssertionError("the Telegram channel did not start")


def leases(port: int) -> list[str]:
    return [lease["name"] for lease in health(port)["cluster"]["leases"]]


def conflicts(tg: FakeTelegram) -> int:
    return sum(1 for call in tg.calls("getUpdates") if call["status"] == 409)


def turns_run(port: int) -> int:
    """Turns this instance answered, from its Prometheus ``/metrics`` (what an operator graphs). Only
    ``ok`` ones: a copy cancelled because another instance took its claim over answers nothing."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return int(
        sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("switchboard_turns_total{") and 'outcome="ok"' in line
        )
    )


@pytest.mark.timeout(420)  # two processes and 360 answers at Telegram's pace: ~80 s quiet, 120-200 s loaded
def test_telegram_polls_on_one_instance_and_a_kill_9_of_it_moves_polling_and_its_turn_to_the_other(
    tmp_path,
    llm,
    telegram,
    fresh_pg_database,  # noqa: F811 (the fixture imported above)
):
    """p1 starts first, takes the Telegram lease and streams a long answer; p2 joins and only replies.
    300 messages over 60 chats are answered once each, in order per chat, with one poller, and both
    instances run turns. Then p1 is killed while the answer streams: p2 polls within the lease TTL,
    finishes the answer in the same message, and answers what was sent during the outage, each once."""
    tg = telegram
    # About 450 s at the first run's pace (1,500 chunks of 2 characters, 0.3 s apart), one Telegram message
    # (3,000 characters): it is killed long before, even when the 300 answers take minutes under load.
    essay = "essay: " + "word " * 600
    state: dict[str, Any] = {"essay_delay": 0.3, "essay_chunk": 2}

    def reply(body: dict[str, Any]) -> Reply:
        text = echo_reply(body).text
        if "write an essay" in text:
            return Reply(text=essay.strip(), chunk_size=state["essay_chunk"], delay=state["essay_delay"])
        return Reply(text=text, delay=0.01)

    llm.default_reply = reply
    chats = list(range(801, 861))
    before, during = 300, len(chats)
    running: list[tuple[int, Any]] = []
    outputs: dict[str, str] = {}
    try:
        # p1 alone: it takes the lease and runs the essay; p2 starts while the essay streams.
        running.append(launch_telegram_instance(tmp_path, "p1", llm, tg, fresh_pg_database))
        wait_ready(*running[0])
        assert leases(running[0][0]) == ["channel:telegram"]
        running.append(launch_telegram_instance(tmp_path, "p2", llm, tg, fresh_pg_database))
        tg.user_message(900, "write an essay", user_id=900)
        assert leases_once_open(*running[1]) == [], "p1 holds the lease: p2 must not poll"
        wait_ready(*running[1])
        assert leases(running[1][0]) == []
        assert "replies only" in health(running[1][0])["channels"]["telegram"]["detail"]
        until(lambda: any(m.text.startswith("essay: word") for m in tg.bot_messages(900)), seconds=30)

        for n in range(before):
            chat = chats[n % len(chats)]
            tg.user_message(chat, f"before {n}", user_id=chat)
        per_chat = before // len(chats)

        def finished() -> int:
            """Answers whose placeholder has become the final text. Placeholders and their edits share
            Telegram's 30 calls/s, so the last edits trail the last placeholders by many seconds."""
            return sum(1 for c in chats for m in tg.bot_messages(c) if m.text.startswith("echo"))

        until(
            lambda: all(len(tg.bot_messages(c)) == per_chat for c in chats) and finished() == before,
            seconds=240,  # 300 answers: ~40 s quiet; one loaded run of both suites at once took over 120
            progress=lambda: f"{finished()} of {before} answered",
        )
        assert conflicts(tg) == 0, "two instances polled getUpdates at once"
        assert tg.bot_messages(900)[0].text != essay.strip(), "the essay must still be streaming"
        # Counted when a turn's record closes, a moment after its final text is visible.
        until(lambda: sum(turns_run(port) for port, _proc in running) >= before, seconds=10)
        work = [turns_run(port) for port, _proc in running]
        assert sum(work) == before, work
        assert min(work) > 0, f"one instance ran every turn: {work}"

        running[0][1].send_signal(signal.SIGKILL)
        running[0][1].wait(timeout=30)
        killed_at = time.time()
        state.update(essay_delay=0.01, essay_chunk=50)  # the re-run need not be slow
        for n in range(during):
            chat = chats[n % len(chats)]
            tg.user_message(chat, f"during {n}", user_id=chat)
        until(lambda: any(c["at"] > killed_at for c in tg.calls("getUpdates")), seconds=LEASE_TTL + 5)
        resumed = min(c["at"] for c in tg.calls("getUpdates") if c["at"] > killed_at) - killed_at
        assert leases(running[1][0]) == ["channel:telegram"]
        until(lambda: all(len(tg.bot_messages(c)) == per_chat + 1 for c in chats), seconds=60)
        until(lambda: tg.bot_messages(900)[0].text == essay.strip(), seconds=30)
        time.sleep(2)  # a second answer, if any, would land now
    finally:
        for (_port, proc), name in zip(running, ("p1", "p2"), strict=False):
            outputs[name] = stop(proc)
    assert resumed <= LEASE_TTL + 1, f"polling resumed {resumed:.1f} s after the kill"
    [answer] = tg.bot_messages(900)  # the placeholder became the answer: no second reply
    assert answer.text == essay.strip()
    for chat in chats:
        expected = [f"echo: before {n}" for n in range(before) if chats[n % len(chats)] == chat]
        expected += [f"echo: during {n}" for n in range(during) if chats[n % len(chats)] == chat]
        assert tg.bot_texts(chat) == expected
    assert "took over inbox entry" in outputs["p2"]
    assert "lease channel:telegram acquired" in outputs["p2"]
    assert "Traceback" not in outputs["p2"], outputs["p2"]
    print(
        f"turns run by p1/p2: {work[0]}/{work[1]}; "
        f"failover: kill -9 of the Telegram lease holder → the other polls after {resumed:.1f} s"
    )


def component_up(port: int, component: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    prefix = f'switchboard_component_up{{component="{component}"}}'
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def intake(port: int) -> str:
    """The Telegram channel's ``intake`` in /health (which waits up to 2 s per database check)."""
    return str(
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=15).json()["channels"]["telegram"]["intake"]
    )


@pytest.mark.timeout(300)
def test_a_telegram_holder_whose_database_stalls_hands_polling_to_the_other_process_without_a_409(
    tmp_path,
    llm,
    fresh_pg_database,  # noqa: F811 (the fixture imported above)
):
    """p1 reaches PostgreSQL through a proxy that stalls (a database too slow to answer) and polls with
    10 s long polls. When it stalls, p1's polls all end before p2's first one — p2 takes the lease when
    it lapses, polls within the TTL and answers the message sent during the stall, with no 409 — and
    p1's /health and /metrics say it receives nothing while p2's say it does. When the database answers
    again, p1 stands by for p2."""
    url = make_url(fresh_pg_database)
    running: list[tuple[int, Any]] = []
    outputs: dict[str, str] = {}
    with (
        FakeTelegram(bot_username="switchboard_bot", long_poll_cap=10) as tg,
        StallingProxy(url.host or "127.0.0.1", url.port or 5432) as db_proxy,
        StallingProxy("127.0.0.1", tg.port) as tg_proxy,
    ):
        p1_db = url.set(host="127.0.0.1", port=db_proxy.port).render_as_string(hide_password=False)
        p1_tg = f"http://127.0.0.1:{tg_proxy.port}"
        p1_host = f"127.0.0.1:{tg_proxy.port}"
        long_polls = {"poll_timeout_seconds": 10}
        try:
            port1 = free_port()
            config1 = write_telegram_config(
                tmp_path, "p1", llm.base_url, tg, p1_db, telegram={**long_polls, "api_base_url": p1_tg}
            )
            running.append((port1, serve(config1, port1)))
            wait_ready(*running[0])
            assert leases(port1) == ["channel:telegram"]
            port2 = free_port()
            config2 = write_telegram_config(
                tmp_path, "p2", llm.base_url, tg, fresh_pg_database, telegram=long_polls
            )
            running.append((port2, serve(config2, port2)))
            wait_ready(*running[1])
            assert intake(port2) == "not receiving (standby: lease held by instance p1)"
            assert (component_up(port1, "channel:telegram"), component_up(port2, "channel:telegram")) == (
                1,
                0,
            )
            tg.user_message(700, "before", user_id=700)
            until(lambda: tg.bot_texts(700) == ["echo: before"], seconds=30)

            db_proxy.stall()
            stalled_at = time.time()
            tg.user_message(701, "during the stall", user_id=701)
            until(lambda: tg.bot_texts(701) == ["echo: during the stall"], seconds=LEASE_TTL + 20)
            polls = tg.calls("getUpdates")
            p2_first = min(c["at"] for c in polls if c["host"] != p1_host and c["at"] > stalled_at)
            late = [c for c in polls if c["host"] == p1_host and c["at"] + c["params"]["timeout"] > p2_first]
            assert late == [], f"p1 polled while p2 did: {late}"
            assert p2_first - stalled_at <= LEASE_TTL + 1, f"p2 polled {p2_first - stalled_at:.1f} s later"
            assert conflicts(tg) == 0, "two instances polled getUpdates at once"
            assert intake(port1).startswith("not receiving (lease"), intake(port1)
            assert intake(port2) == "receiving"
            assert (component_up(port1, "channel:telegram"), component_up(port2, "channel:telegram")) == (
                0,
                1,
            )

            db_proxy.resume()
            until(lambda: intake(port1) == "not receiving (standby: lease held by instance p2)", seconds=15)
            tg.user_message(702, "after", user_id=702)
            until(lambda: tg.bot_texts(702) == ["echo: after"], seconds=30)
            time.sleep(1)  # a second answer, if any, would land now
            assert conflicts(tg) == 0
        finally:
            db_proxy.resume()
            for (_port, proc), name in zip(running, ("p1", "p2"), strict=False):
                outputs[name] = stop(proc)
        assert [tg.bot_texts(chat) for chat in (700, 701, 702)] == [
            ["echo: before"],
            ["echo: during the stall"],
            ["echo: after"],
        ]
    assert "lease channel:telegram could not be renewed in time" in outputs["p1"]
    assert "lease channel:telegram acquired (token 2)" in outputs["p2"]
    print(f"database stall: p2 polled {p2_first - stalled_at:.1f} s after it began, without a 409")


# --- /stop across instances, Telegram in webhook mode --------------------------------------------------

WEBHOOK_SECRET = "cluster-webhook_Secret-0123456789"


async def inbox_texts(url: str) -> list[str]:
    """What the instances stored in the shared inbox, read straight from PostgreSQL."""
    conn = await asyncpg.connect(
        make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    )
    try:
        return [json.loads(row["payload"])["text"] for row in await conn.fetch("SELECT payload FROM inbox")]
    finally:
        await conn.close()


def test_stop_sent_through_one_instance_stops_the_turn_running_on_the_other(
    tmp_path,
    llm,
    fresh_pg_database,  # noqa: F811 (the fixture imported above)
):
    """Webhook mode: Telegram pushes each update to whichever instance's URL is registered (behind a
    load balancer, any of them); a forged update without Telegram's secret header is refused (401)
    and stores nothing. b runs a long answer; a, registered next, receives the /stop. b takes
    one turn at a time and claims nothing ahead, so the /stop runs on a, which finds the turn's claim
    held by b and sends it there: the answer stops where it was, on b, and ends with "⏹ Stopped."."""
    llm.default_reply = lambda body: Reply(text="a very long answer " * 200, chunk_size=4, delay=0.05)
    outputs: dict[str, str] = {}
    running: dict[str, tuple[int, Any]] = {}
    with FakeTelegram(bot_username="switchboard_bot", local_mode=True, webhook_retry_seconds=0.2) as tg:

        def launch(name: str, turns: int = 32, claim_ahead: int = 64) -> tuple[int, Any]:
            port = free_port()
            webhook = {"mode": "webhook", "webhook_secret": WEBHOOK_SECRET}
            server = {"host": "127.0.0.1", "port": port, "public_url": f"http://127.0.0.1:{port}"}
            config = write_telegram_config(
                tmp_path,
                name,
                llm.base_url,
                tg,
                fresh_pg_database,
                webhook,
                {"claim_ahead": claim_ahead},
                server=server,
                bus={"max_concurrent_turns": turns},
            )
            running[name] = (port, serve(config, port))
            wait_ready(*running[name])
            until(lambda: tg.webhook_url.startswith(f"http://127.0.0.1:{port}/"), seconds=30)
            return running[name]

        try:
            launch("b", turns=1, claim_ahead=0)
            tg.user_message(900, "write an essay", user_id=900)
            until(lambda: any(m.text.startswith("a very long") for m in tg.bot_messages(900)), seconds=30)
            a_port, _ = launch("a")  # Telegram now pushes to a
            # Anyone who finds the URL: a well-formed update without Telegram's secret header.
            forged = {
                "update_id": 990_001,
                "message": tg.user_message(901, "run rm -rf", user_id=901, push=False),
            }
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "guessed"}):
                refused = httpx.post(
                    f"http://127.0.0.1:{a_port}/api/webhooks/telegram",
                    json=forged,
                    headers=headers,
                    timeout=10,
                )
                assert refused.status_code == 401, refused.text
            tg.user_message(900, "/stop", user_id=900)
            until(lambda: any(m.text.endswith("⏹ Stopped.") for m in tg.bot_messages(900)), seconds=30)
            time.sleep(1)  # a second reply, if any, would land now
        finally:
            for name, (_port, proc) in running.items():
                outputs[name] = stop(proc)
    texts = tg.bot_texts(900)
    [stopped] = [t for t in texts if t.endswith("⏹ Stopped.")]
    assert len(stopped) < len("a very long answer " * 200), "the answer ran to its end"
    assert "Stopping the current reply." in texts
    assert not any(t.startswith("Nothing is running") for t in texts), texts
    assert "cluster: /stop for a turn on instance b sent there" in outputs["a"]
    assert tg.bot_messages(901) == [], "a forged update was answered"
    stored = asyncio.run(inbox_texts(fresh_pg_database))
    assert sorted(stored) == ["/stop", "write an essay"], "a forged update was stored"
    for output in outputs.values():
        assert "Traceback" not in output, output
