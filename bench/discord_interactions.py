"""Benchmark: how soon Discord hears back from a slash command, alone and in a burst.

The chain is real except the two ends: FakeDiscord (REST, gateway, interaction callback and webhook on
127.0.0.1) ↔ discord.py ↔ DiscordChannel ↔ Service/manager ↔ FakeOpenAI (not called: the commands are
answered by the manager). Discord refuses a first callback later than 3 s, so what counts is the time
from the INTERACTION_CREATE dispatch to the accepted callback (``FakeInteraction.callback_after``) and
whether it was the answer itself (type 4) or "thinking…" (type 5).

Each round sends ``--burst`` interactions at once (``/help`` and ``/status`` alternating, each from its
own user in its own DM), ``--rounds`` times after one warm-up round.
Run:  python -m bench.discord_interactions --rounds 5 --burst 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.settings import scratch_overrides
from channels.discord.channel import DiscordChannel
from config.loader import load_settings
from tests.fakes.discord import FakeDiscord, FakeInteraction
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import Harness

for _var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_var, None)


async def wait_for(probe: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.01)


async def run(args: argparse.Namespace) -> list[FakeInteraction]:
    measured: list[FakeInteraction] = []
    with FakeOpenAI() as llm, FakeDiscord() as fake, tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            overrides={
                **scratch_overrides(tmp, llm.base_url),
                "channels": {
                    "discord": {
                        "enabled": True,
                        "bot_token": fake.token,
                        "api_base_url": fake.api_base_url,
                        "gateway_url": fake.gateway_url,
                        "guild_ready_timeout": 0.05,
                    }
                },
            },
            env={},
        )
        channel = DiscordChannel(settings.channels.discord, settings=settings)
        async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
            await wait_for(lambda: fake.app_commands, 30, "the slash commands")
            for round_ in range(args.rounds + 1):  # round 0 warms imports and the database up
                batch = [
                    fake.interaction_create(
                        fake.new_id(), f"{9000 + round_ * 1000 + i}", "help" if i % 2 else "status"
                    )
                    for i in range(args.burst)
                ]
                await wait_for(
                    lambda b=batch: all(
                        fake.interaction_messages(i.id)
                        and not any(m.loading for m in fake.interaction_messages(i.id))
                        for i in b
                    ),
                    60,
                    "every answer",
                )
                await harness.idle(timeout=60)
                if round_:
                    measured.extend(batch)
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burst", type=int, default=20)
    args = parser.parse_args(argv)
    measured = asyncio.run(run(args))
    acked = sorted(i.callback_after for i in measured if i.callback_after is not None)
    deferred = sum(i.callback_type == 5 for i in measured)
    missing = len(measured) - len(acked)
    p95 = acked[max(0, int(len(acked) * 0.95) - 1)]
    print(f"discord interactions: {args.rounds} rounds × burst {args.burst} ({len(measured)} commands)")
    print(
        f"dispatch → accepted callback: median {statistics.median(acked) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms, max {acked[-1] * 1000:.0f} ms; "
        f"{len(acked) - deferred} answered directly, {deferred} deferred, {missing} never acknowledged"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
