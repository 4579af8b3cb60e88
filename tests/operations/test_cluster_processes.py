"""Two real ``serve`` processes on one PostgreSQL database, fed by GitHub webhooks (issue 17).

GitHub delivers each webhook to one URL; behind a load balancer that is any instance, so the test
posts signed deliveries alternately to both. Replies go to the fake GitHub API, which both instances
call, so "answered once" and "one visible comment" are checked where a user would look.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fakes.github import FakeGitHub
from tests.fakes.openai_server import Reply, echo_reply
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
            raise AssertionError(proc.stdout.read() if proc.stdout else "serve exited")
        try:
            if health(port).get("agent") == "ready":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("serve did not become ready")


def until(predicate: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
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


def test_two_serve_processes_answer_every_comment_once_in_order_and_both_work(
    tmp_path,
    llm,
    github,
    fresh_pg_database,  # noqa: F811 (the fixture imported above)
):
    def slow(body: dict[str, Any]) -> Reply:
        return Reply(text=echo_reply(body).text, delay=0.02)

    llm.default_reply = slow
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
    finally:
        outputs = [stop(proc) for _port, proc in running]
    assert sorted(m["id"] for m in members) == ["p1", "p2"]
    for issue in issues:
        comments = sorted(github.comments_on(REPO, issue), key=lambda c: c.id)
        assert len(comments) == per_issue, [c.body for c in comments]
        for round_, comment in enumerate(comments):
            assert f"question {round_} on {issue}" in comment.body, "answered out of order"
    for output in outputs:
        assert "Traceback" not in output, output
        assert output.count("turn finished") > 0, "both instances must have run turns"


def test_kill_9_of_the_instance_running_a_turn_lets_the_other_finish_it_once(
    tmp_path,
    llm,
    github,
    fresh_pg_database,  # noqa: F811 (the fixture imported above)
):
    def slow(body: dict[str, Any]) -> Reply:
        return Reply(text=echo_reply(body).text + " and a long tail" * 10, chunk_size=4, delay=0.15)

    llm.default_reply = slow
    running = start_two(tmp_path, llm, github, fresh_pg_database)
    survivor_output = ""
    try:
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
        for _port, proc in running:
            output = stop(proc)
            if proc.returncode != -signal.SIGKILL:
                survivor_output = output
    [comment] = github.comments_on(REPO, 700)  # the placeholder became the answer: one comment
    assert comment.body.endswith("and a long tail")
    assert "took over inbox entry" in survivor_output
    print(
        f"failover: kill -9 → survivor edits the comment after {took_over:.1f} s, answer done after {took:.1f} s"
    )
