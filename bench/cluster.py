"""Benchmark: several ``serve`` processes on one PostgreSQL database (issue 17).

Throughput: N GitHub comments over M issues, posted as fast as the webhook answers, alternately to every
instance; measured from the first post to the last answer on the fake GitHub API, with 1 and then 2
instances. The model is the fake OpenAI server answering at once (``--delay`` adds per-chunk time).

Failover: one slow turn, kill -9 of the instance running it, and the time until the survivor edits
the same comment (its takeover) and until the answer is complete.

    SWITCHBOARD_BENCH_PG_URL=postgresql+asyncpg://postgres:postgres@127.0.0.1:5432/postgres \\
        python -m bench.cluster --comments 200 --issues 40

Capacity (issue 32, item 7): ``--model-seconds 1 --turn-slots 2`` gives every answer a one-second model
and each instance two turn slots, so the answered rate is bound by slots, not by this machine's CPU, and
two instances should answer close to twice as many per second.

Each run uses a fresh database on that server (created and dropped here).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import yaml
from sqlalchemy.engine import make_url

from tests.fakes.github import FakeGitHub
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply
from tests.foundation.test_cli import free_port
from tests.github.conftest import APP_ID, BOT, REPO, _key_pair, comment_payload
from tests.operations.test_cluster_processes import deliver, health, until, wait_ready, write_config
from tests.operations.test_instances import serve, stop


async def _admin(url: str, sql: str) -> None:
    base = make_url(url)
    conn = await asyncpg.connect(
        host=base.host,
        port=base.port or 5432,
        user=base.username,
        password=base.password,
        database="postgres",
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def fresh_database(url: str) -> str:
    name = f"sb_bench_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(url, f'CREATE DATABASE "{name}"'))
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    name = make_url(url).database
    asyncio.run(_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def start(
    tmp: Path, count: int, llm: FakeOpenAI, github: FakeGitHub, url: str, turn_slots: int | None = None
) -> list[tuple[int, Any]]:
    running = []
    for n in range(count):
        port = free_port()
        config = write_config(tmp, f"i{n}", llm.base_url, github.url, url)
        if turn_slots is not None:
            limit_turn_slots(config, turn_slots)
        running.append((port, serve(config, port)))
    for port, proc in running:
        wait_ready(port, proc)
    return running


def limit_turn_slots(config: Path, slots: int) -> None:
    """Few turn slots and no claims ahead: an instance takes only the turns it can run now, so the
    second instance gets the rest and the comparison measures capacity, not this machine's CPU."""
    data = yaml.safe_load(config.read_text())
    data["bus"] = {"max_concurrent_turns": slots}
    data["cluster"]["claim_ahead"] = 0
    config.write_text(yaml.safe_dump(data))


def model(delay: float, model_seconds: float | None) -> Callable[[dict[str, Any]], Reply]:
    """The fake model's answer: streamed with ``delay`` per chunk, or all at once after ``model_seconds``."""

    def answer(body: dict[str, Any]) -> Reply:
        text = echo_reply(body).text
        if model_seconds is not None:
            return Reply(text=text, chunk_size=len(text) or 1, delay=model_seconds)
        return Reply(text=text, delay=delay)

    return answer


def throughput(
    base_url: str,
    instances: int,
    comments: int,
    issues: int,
    delay: float,
    model_seconds: float | None = None,
    turn_slots: int | None = None,
) -> float:
    with (
        FakeOpenAI(model(delay, model_seconds)) as llm,
        FakeGitHub(app_id=APP_ID, public_key_pem=_key_pair()[1], bot_login=f"{BOT}[bot]") as github,
        tempfile.TemporaryDirectory() as tmp,
    ):
        url = fresh_database(base_url)
        running = start(Path(tmp), instances, llm, github, url, turn_slots)
        try:
            numbers = [10_000 + i for i in range(issues)]
            began = time.monotonic()
            for n in range(comments):
                port = running[n % instances][0]
                deliver(port, comment_payload(f"@{BOT} bench-{n}", number=numbers[n % issues]))
            until(
                lambda: (
                    sum(1 for i in numbers for c in github.comments_on(REPO, i) if "bench-" in c.body)
                    >= comments
                ),
                seconds=600,
            )
            return comments / (time.monotonic() - began)
        finally:
            for _port, proc in running:
                stop(proc)
            drop_database(url)


def failover(base_url: str) -> tuple[float, float]:
    def slow(body: dict[str, Any]) -> Reply:
        return Reply(text=echo_reply(body).text + " and a long tail" * 10, chunk_size=4, delay=0.15)

    with (
        FakeOpenAI(slow) as llm,
        FakeGitHub(app_id=APP_ID, public_key_pem=_key_pair()[1], bot_login=f"{BOT}[bot]") as github,
        tempfile.TemporaryDirectory() as tmp,
    ):
        url = fresh_database(base_url)
        running = start(Path(tmp), 2, llm, github, url)
        try:
            deliver(running[0][0], comment_payload(f"@{BOT} survive", number=99))
            until(lambda: any(health(port)["cluster"]["claims"] for port, _ in running), seconds=30)
            runner = next(i for i, (port, _) in enumerate(running) if health(port)["cluster"]["claims"])
            until(lambda: any("survive" in c.body for c in github.comments_on(REPO, 99)), seconds=30)
            running[runner][1].send_signal(signal.SIGKILL)
            running[runner][1].wait(timeout=30)
            killed = time.monotonic()
            versions = len(github.comments_on(REPO, 99)[0].history)
            until(lambda: len(github.comments_on(REPO, 99)[0].history) > versions, seconds=60)
            takeover = time.monotonic() - killed
            until(lambda: github.comments_on(REPO, 99)[0].body.endswith("and a long tail"), seconds=120)
            return takeover, time.monotonic() - killed
        finally:
            for _port, proc in running:
                stop(proc)
            drop_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--comments", type=int, default=200)
    parser.add_argument("--issues", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds per streamed chunk of every answer")
    parser.add_argument(
        "--model-seconds", type=float, default=None, help="the model answers at once after this many seconds"
    )
    parser.add_argument(
        "--turn-slots",
        type=int,
        default=None,
        help="bus.max_concurrent_turns per instance (and claim_ahead 0)",
    )
    parser.add_argument("--skip-failover", action="store_true")
    args = parser.parse_args()
    base = os.environ.get("SWITCHBOARD_BENCH_PG_URL") or os.environ.get("SWITCHBOARD_TEST_PG_URL")
    if not base:
        raise SystemExit(
            "set SWITCHBOARD_BENCH_PG_URL=postgresql+asyncpg://… (a server this may create databases on)"
        )
    rates = []
    for instances in (1, 2):
        rate = throughput(
            base, instances, args.comments, args.issues, args.delay, args.model_seconds, args.turn_slots
        )
        rates.append(rate)
        print(
            f"{instances} instance(s): {args.comments} comments over {args.issues} issues: {rate:.2f} answered/s"
        )
    print(f"2 instances / 1: {rates[1] / rates[0]:.2f}x")
    if not args.skip_failover:
        takeover, done = failover(base)
        print(
            f"failover (claim_ttl_seconds 3, poll_seconds 1): survivor's first edit {takeover:.1f} s after "
            f"kill -9, answer complete {done:.1f} s after it"
        )


if __name__ == "__main__":
    main()
