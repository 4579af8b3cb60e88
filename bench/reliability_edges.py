"""Reliability at the platform edge: ``switchboard serve`` killed with SIGKILL again and again.

The platform fakes (Slack, Feishu and DingTalk with their redelivery, Discord with its history) and the
fake model run in this process; the service runs as a real subprocess on a temporary SQLite database. Each cycle starts the
service, waits for it to connect, sends a few messages (Slack, Feishu, DingTalk: one-to-one messages while connected;
Discord: DMs, some while the gateway is up and some while the service is dead), then kills the service
with ``kill -9`` at a random moment — often mid-turn, sometimes between the inbox commit and the ack.
``unanswered_at_kill_time`` sums, over all kills, the messages that had no answer yet when the service
died: each of those had to come back through the inbox's resume, the platform's redelivery or the
Discord backfill.
After the last cycle one clean run answers what is left; then every message is checked:

* **lost** — no bot message carries its final answer ("echo: <text>");
* **duplicated** — more than one bot message carries it.

Retry budgets are the platforms' own counts (Slack 3 retries, Feishu 4; DingTalk's is an assumption, see
the fake) with shortened pauses; an event the platform gave up on is counted as lost and also listed
separately, so a lost message can be told apart from a platform limit.

Run:  python -m bench.reliability_edges --platform slack --cycles 20
      python -m bench.reliability_edges --platform discord --cycles 20   (also feishu, dingtalk)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.discord import FakeDiscord
from tests.fakes.feishu import FakeLark
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.fakes.slack import FakeSlack

for _var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_var, None)

REPO = Path(__file__).resolve().parent.parent
USERS = 5


def slow_echo(request: dict[str, Any]) -> Reply:
    """An answer streamed over about half a second, so a kill often lands mid-turn."""
    return Reply(text=f"echo: {last_user_text(request)}", chunk_size=2, delay=0.15)


def write_config(directory: Path, llm: FakeOpenAI, platform: str, fake: Any) -> Path:
    if platform == "feishu":
        section = {
            "enabled": True,
            "app_id": fake.app_id,
            "app_secret": fake.app_secret,
            "domain": fake.url,
            "edit_interval_seconds": 0.05,
        }
    elif platform == "dingtalk":
        section = {
            "enabled": True,
            "client_id": fake.client_id,
            "client_secret": fake.client_secret,
            "api_base_url": fake.url,
            "oapi_base_url": fake.url,
            "edit_interval_seconds": 0.05,
        }
    elif platform == "slack":
        section = {
            "enabled": True,
            "bot_token": fake.bot_token,
            "app_token": fake.app_token,
            "api_base_url": fake.api_url,
            "edit_interval_seconds": 0.05,
            "ping_interval_seconds": 5,
        }
    else:
        section = {
            "enabled": True,
            "bot_token": fake.token,
            "api_base_url": fake.api_base_url,
            "gateway_url": fake.gateway_url,
            "guild_ready_timeout": 0.05,
            "edit_interval_seconds": 0.05,
        }
    # The load's users are members (a stranger's first message would get a pairing request instead).
    section["trust"] = {"members": ["*"]}
    config = {
        "server": {"host": "127.0.0.1", "port": 0},
        "database": {"url": f"sqlite+aiosqlite:///{directory / 'bench.db'}"},
        "data_dir": str(directory / "data"),
        "models": [{"name": "default", "model": "fake", "api_key": "sk-bench", "base_url": llm.base_url}],
        "memory": {"enabled": False},
        "channels": {platform: section},
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_service(config: Path, log: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "--log-level", "WARNING", "serve", "--config", str(config)],
        cwd=str(REPO),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def kill_hard(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(10)


async def wait_until(predicate: Callable[[], Any], limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class SlackDriver:
    def __init__(self) -> None:
        self.fake = FakeSlack(retry_delays=(0.0, 1.0, 2.0))  # Slack's 3 s ack timeout, retries sooner

    async def connected(self, opened_before: int) -> None:
        await wait_until(
            lambda: self.fake.connections_opened > opened_before and self.fake.connected, 90, "Socket Mode"
        )

    def opened(self) -> int:
        return self.fake.connections_opened

    def send(self, user: int, text: str, *, down: bool) -> None:
        self.fake.dm(f"U{user}", text)

    def answers(self, user: int, text: str) -> int:
        return sum(1 for m in self.fake.channel_messages(f"DU{user}") if m.text == f"echo: {text}")

    def settled(self) -> bool:
        return not self.fake.retrying

    def given_up(self) -> int:
        return len(self.fake.given_up)


class FeishuDriver:
    def __init__(self) -> None:
        self.fake = FakeLark(retry_delays=(1.0, 2.0, 4.0, 8.0))  # Feishu's 3 s deadline, re-push sooner

    async def connected(self, opened_before: int) -> None:
        await wait_until(
            lambda: self.fake.ws_connections > opened_before and self.fake.connected,
            90,
            "the long connection",
        )

    def opened(self) -> int:
        return self.fake.ws_connections

    def send(self, user: int, text: str, *, down: bool) -> None:
        self.fake.send_message_event(f"oc_p2p_{user}", "p2p", f"ou_user{user:028d}", text)

    def answers(self, user: int, text: str) -> int:
        return sum(1 for m in self.fake.chat(f"oc_p2p_{user}") if m.text == f"echo: {text}")

    def settled(self) -> bool:
        return not self.fake.retrying

    def given_up(self) -> int:
        return len(self.fake.given_up)


class DingTalkDriver:
    def __init__(self) -> None:
        self.fake = FakeDingTalk(retry_delays=(1.0, 2.0, 4.0, 8.0))

    async def connected(self, opened_before: int) -> None:
        await wait_until(
            lambda: self.fake.connections_opened > opened_before and self.fake.connected, 90, "the stream"
        )

    def opened(self) -> int:
        return self.fake.connections_opened

    def send(self, user: int, text: str, *, down: bool) -> None:
        self.fake.send_bot_message("1", text, sender_id=f"user{user}")

    def answers(self, user: int, text: str) -> int:
        conversation = self.fake.p2p_conversation(f"user{user}")
        return sum(1 for t in self.fake.markdown_texts(conversation) if t == f"echo: {text}")

    def settled(self) -> bool:
        return not self.fake.retrying

    def given_up(self) -> int:
        return len(self.fake.given_up)


class DiscordDriver:
    def __init__(self) -> None:
        self.fake = FakeDiscord()
        self.dms: dict[int, str] = {}

    async def connected(self, opened_before: int) -> None:
        await wait_until(lambda: len(self.fake.identifies) > opened_before, 90, "the gateway")

    def opened(self) -> int:
        return len(self.fake.identifies)

    def send(self, user: int, text: str, *, down: bool) -> None:
        channel = self.dms.setdefault(user, self.fake.new_id())
        self.fake.message_create(channel, str(9000 + user), text)

    def answers(self, user: int, text: str) -> int:
        return sum(1 for m in self.fake.in_channel(self.dms[user]) if m.text == f"echo: {text}")

    def settled(self) -> bool:
        return True

    def given_up(self) -> int:
        return 0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    drivers: dict[str, type[SlackDriver | DiscordDriver | FeishuDriver | DingTalkDriver]] = {
        "slack": SlackDriver,
        "discord": DiscordDriver,
        "feishu": FeishuDriver,
        "dingtalk": DingTalkDriver,
    }
    driver = drivers[args.platform]()
    sent: list[tuple[int, str]] = []
    unanswered_at_kills = 0  # summed over kills: messages not yet answered when the service died
    with FakeOpenAI(default_reply=slow_echo) as llm, driver.fake, tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        config = write_config(directory, llm, args.platform, driver.fake)
        log = (directory / "serve.log").open("ab")
        started = time.monotonic()
        try:
            # Warm-up: every user talks once, so Discord follows their DMs (a DM the bot never saw
            # cannot be found again; see docs/channels/discord.md).
            process = start_service(config, log)
            await driver.connected(0)
            for user in range(USERS):
                text = f"hello-{user}"
                sent.append((user, text))
                driver.send(user, text, down=False)
            await wait_until(lambda: all(driver.answers(u, t) for u, t in sent), 120, "the warm-up answers")
            for cycle in range(args.cycles):
                for index in range(args.per_cycle):
                    user, text = rng.randrange(USERS), f"c{cycle}-m{index}"
                    sent.append((user, text))
                    driver.send(user, text, down=False)
                    await asyncio.sleep(rng.uniform(0.0, 0.3))
                await asyncio.sleep(rng.uniform(0.0, 0.6))
                kill_hard(process)
                unanswered_at_kills += sum(1 for u, t in sent if not driver.answers(u, t))
                if args.platform == "discord":  # messages sent while nobody is connected
                    for index in range(args.while_down):
                        user, text = rng.randrange(USERS), f"c{cycle}-down{index}"
                        sent.append((user, text))
                        driver.send(user, text, down=True)
                opened = driver.opened()
                process = start_service(config, log)
                await driver.connected(opened)
            # The last run is not killed: it answers whatever is left.
            await wait_until(
                lambda: all(driver.answers(u, t) for u, t in sent) and driver.settled(),
                args.settle,
                "every message to be answered",
            )
        except RuntimeError as exc:
            print(f"note: {exc}; counting what arrived", file=sys.stderr)
        finally:
            elapsed = time.monotonic() - started
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                kill_hard(process)
            log.close()
        counts = [driver.answers(u, t) for u, t in sent]
        for (user, text), count in zip(sent, counts, strict=True):
            if count != 1:
                print(f"{'lost' if count == 0 else 'duplicated'}: user {user} {text!r}", file=sys.stderr)
        if args.keep:
            kept = Path(tempfile.mkdtemp(prefix="reliability-"))
            for name in ("bench.db", "serve.log"):
                if (directory / name).exists():
                    (kept / name).write_bytes((directory / name).read_bytes())
            print(f"kept the database and log in {kept}", file=sys.stderr)
        return {
            "platform": args.platform,
            "cycles": args.cycles,
            "messages": len(sent),
            "kills": args.cycles,
            "unanswered_at_kill_time": unanswered_at_kills,
            "lost": sum(1 for c in counts if c == 0),
            "duplicated": sum(1 for c in counts if c > 1),
            "given_up_by_platform": driver.given_up(),
            "model_calls": len(llm.completions),
            "seconds": round(elapsed, 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--platform", choices=("slack", "discord", "feishu", "dingtalk"), default="slack")
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--per-cycle", type=int, default=4, help="messages sent while the service runs")
    parser.add_argument("--while-down", type=int, default=2, help="Discord: messages sent while it is dead")
    parser.add_argument("--settle", type=float, default=180.0, help="seconds the last run gets to catch up")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--keep", action="store_true", help="keep the database and server log")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(f"machine{' ' * (width - 6)} {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
