"""Benchmark: pacing per rate-limit scope — Slack's workspace-wide chat.update, Telegram's group finals.

Both halves run the real chain between two fakes (platform fake ↔ real SDK ↔ channel ↔ service ↔
FakeOpenAI) with production pacing.

* **Slack**: ``--slack-answers`` answers stream at the same time in one workspace (DMs, edit path), each
  ``--tokens`` tokens at ``--rate`` tokens/s, against a FakeSlack that enforces Slack's Tier 3 limit on
  chat.update (50 in any trailing 60 s per workspace; 429 + Retry-After beyond). Reports the busiest
  60 s window of chat.update calls, the mean rate per minute, how many calls were refused, and the
  longest time one answer went without an update. ``--per-chat-only`` runs it twice more with the
  workspace budget switched off (the pacing before issue 19 item 5: one budget per channel): against a
  fake that does not enforce (what that pacing asks for) and one that does (what the user then sees).
* **Telegram**: ``--tg-answers`` answers in a group and in a private chat, one after another; reports the
  time from the model's last chunk to the call that put the final text on screen.

Run:  python -m bench.pacing --tokens 1000 --rate 15 --per-chat-only
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from bench.settings import scratch_overrides
from bench.stream_slack import answer_text
from bench.stream_telegram import StampedOpenAI, make_answer
from channels.reply import CallKind, RateBudget
from channels.slack.channel import SlackChannel
from channels.telegram.channel import TelegramChannel
from channels.types import InboundMessage
from config.channels.telegram import TelegramConfig
from config.loader import load_settings
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

for _var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_var, None)


class PerChatOnlySlack(SlackChannel):
    """The Slack channel with its workspace-wide chat.update budget removed (the old pacing)."""

    def shared_budgets(self, message: InboundMessage, kind: CallKind) -> tuple[RateBudget, ...]:
        return ()


def settings_for(tmp: str, llm: FakeOpenAI, channels: dict[str, Any] | None = None) -> Any:
    return load_settings(
        overrides={
            **scratch_overrides(tmp, llm.base_url),
            "channels": channels or {},
        },
        env={},
    )


def busiest_window(times: Sequence[float], window: float = 60.0) -> int:
    """Most calls in any ``window`` seconds (what a sliding-window limiter counts)."""
    ordered, best, start = sorted(times), 0, 0
    for end, at in enumerate(ordered):
        while ordered[start] <= at - window:
            start += 1
        best = max(best, end - start + 1)
    return best


async def slack_run(args: argparse.Namespace, per_chat_only: bool, enforce: bool = True) -> dict[str, Any]:
    text = answer_text(args.tokens)
    users = [f"UPACE{i}" for i in range(args.slack_answers)]
    with FakeOpenAI() as llm, FakeSlack() as slack, tempfile.TemporaryDirectory() as tmp:
        if not enforce:
            slack.method_limits.clear()  # what the pacing would send if Slack let it
        section = {
            "enabled": True,
            "bot_token": slack.bot_token,
            "app_token": slack.app_token,
            "api_base_url": slack.api_url,
            "native_streaming": False,  # top-level DMs use chat.update anyway; keep every answer on it
        }
        settings = settings_for(tmp, llm, {"slack": section})
        kind = PerChatOnlySlack if per_chat_only else SlackChannel
        channel = kind(settings.channels.slack, settings=settings)
        async with Harness.running(settings, channels={"slack": channel}) as harness:  # type: ignore[dict-item]
            await slack.wait_connected()
            llm.script(*(Reply(text=text, chunk_size=4, delay=1.0 / args.rate) for _ in users))
            started = time.monotonic()
            for user in users:
                slack.dm(user, "write me a long answer")
            for user in users:
                await slack.wait_for(
                    lambda u=user: any(m.text.endswith(text[-30:]) for m in slack.channel_messages(f"D{u}")),
                    args.tokens / args.rate * 4 + 120,
                    "the final text",
                )
            elapsed = time.monotonic() - started
            await harness.idle(timeout=60)
        updates = slack.calls_to("chat.update")
    accepted = [c.at for c in updates if c.error is None]
    span = max(accepted) - min(accepted) if len(accepted) > 1 else 0.0
    gaps = [
        max((b - a for a, b in itertools.pairwise(t)), default=0.0)
        for t in (
            sorted(c.at for c in updates if c.error is None and c.args.get("channel") == f"D{u}")
            for u in users
        )
    ]
    return {
        "longest_gap_s": max(gaps),
        "updates": len(updates),
        "refused": sum(c.error == "ratelimited" for c in updates),
        "busiest_60s": busiest_window(accepted),
        "per_minute": len(accepted) / span * 60 if span else 0.0,
        "elapsed_s": elapsed,
    }


async def telegram_run(args: argparse.Namespace) -> dict[str, list[float]]:
    delay = 1.0 / args.tg_rate
    text = make_answer(args.tg_tokens)
    last_word = text.split()[-1]
    delays: dict[str, list[float]] = {"group": [], "private": []}
    with StampedOpenAI() as llm, FakeTelegram() as tg, tempfile.TemporaryDirectory() as tmp:
        settings = settings_for(tmp, llm)
        config = TelegramConfig(
            enabled=True,
            bot_token=tg.token,
            api_base_url=tg.url,
            poll_timeout_seconds=5,
            private_drafts=False,  # the edit path in both chat types, so the two rows compare
        )
        channel = TelegramChannel(config, settings=settings)
        async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
            for index in range(args.tg_answers):
                for kind in ("group", "private"):
                    chat_id = 7000 + index if kind == "private" else -(7000 + index)
                    prompt = f"@{tg.bot_username} go" if kind == "group" else "go"
                    llm.script(Reply(text=text, chunk_size=4, delay=delay))
                    before = len(tg.requests)
                    tg.user_message(chat_id, prompt, chat_type="supergroup" if kind == "group" else "private")
                    await tg.wait_until(
                        lambda c=chat_id: any(
                            m.text.rstrip().endswith(last_word) for m in tg.bot_messages(c)
                        ),
                        timeout=300,
                    )
                    await harness.idle(timeout=60)
                    final = next(
                        c
                        for c in tg.calls()[before:]
                        if c["method"] in ("sendMessage", "editMessageText")
                        and c["params"].get("chat_id") == chat_id
                        and c["status"] == 200
                        and str(c["params"].get("text") or "").rstrip().endswith(last_word)
                    )
                    delays[kind].append(final["at"] - llm.stream_ends[-1])
    return delays


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--slack-answers", type=int, default=3, help="concurrent Slack answers")
    parser.add_argument("--tokens", type=int, default=1000, help="tokens per Slack answer")
    parser.add_argument("--rate", type=float, default=15.0, help="Slack model speed, tokens/s")
    parser.add_argument("--per-chat-only", action="store_true", help="also run without the workspace budget")
    parser.add_argument("--tg-answers", type=int, default=3, help="Telegram answers per chat type")
    parser.add_argument("--tg-tokens", type=int, default=1000)
    parser.add_argument("--tg-rate", type=float, default=50.0)
    parser.add_argument("--skip", choices=("slack", "telegram"), help="run only the other half")
    args = parser.parse_args(argv)
    print(f"bench.pacing on {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.skip != "slack":
        runs = [("channel + workspace budget", False, True)]
        if args.per_chat_only:
            runs += [
                ("per-channel budget only (before), fake not enforcing", True, False),
                ("per-channel budget only (before), fake enforcing", True, True),
            ]
        for label, per_chat_only, enforce in runs:
            r = asyncio.run(slack_run(args, per_chat_only, enforce))
            print(
                f"Slack, {args.slack_answers} concurrent answers × {args.tokens} tokens at {args.rate:g} tok/s, "
                f"{label}: {r['updates']} chat.update in {r['elapsed_s']:.0f} s; busiest 60 s window "
                f"{r['busiest_60s']} accepted (limit 50); mean {r['per_minute']:.0f}/min; "
                f"{r['refused']} refused with 429; longest time one answer went without an update "
                f"{r['longest_gap_s']:.1f} s"
            )
    if args.skip != "telegram":
        delays = asyncio.run(telegram_run(args))
        for kind, values in delays.items():
            print(
                f"Telegram {kind}: model's last chunk → final text on screen, {len(values)} answers × "
                f"{args.tg_tokens} tokens at {args.tg_rate:g} tok/s: median {statistics.median(values):.2f} s, "
                f"max {max(values):.2f} s ({', '.join(f'{v:.2f}' for v in values)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
