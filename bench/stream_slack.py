"""Benchmark: what one streamed answer costs in Slack API calls, and how soon the user sees text.

The whole chain is real except the two ends: FakeSlack (Web API + Socket Mode on 127.0.0.1) ↔ slack-sdk /
slack-bolt ↔ SlackChannel ↔ Service/manager/LangGraph ↔ FakeOpenAI streaming a scripted answer of
``--tokens`` tokens (about 4 characters each) at ``--rate`` tokens per second.

Each answer is to a channel mention, so it goes into a thread, where both paths exist: the native
stream (chat.startStream / appendStream / stopStream, ``native_streaming: true``) and the edit path
(chat.postMessage + chat.update). Per answer it reports the Web API calls the reply made (those five
methods plus assistant.threads.setStatus) and the time from the model's first token to the first call
that shows answer text (not the "…" placeholder).
Run:  python -m bench.stream_slack --answers 3 --tokens 1000 --rate 50 [--mode native|edit|both]
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
from channels.slack.channel import EDIT_INTERVAL, TEXT_LIMIT, SlackChannel
from config.loader import load_settings
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack import FakeSlack
from tests.harness import Harness

for _var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_var, None)


class TimedOpenAI(FakeOpenAI):
    """The fake model, stamping when each request arrived (its first token follows after one delay)."""

    def record(self, entry: dict[str, Any]) -> None:
        super().record({**entry, "at": time.time()})


def answer_text(tokens: int) -> str:
    """``tokens`` four-character tokens, in lines of 20, like a long prose answer."""
    words = [f"w{i % 100:02d}" for i in range(tokens)]
    lines = [" ".join(words[i : i + 20]) for i in range(0, tokens, 20)]
    return "\n".join(lines)


REPLY_METHODS = (
    "chat.postMessage",
    "chat.update",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "assistant.threads.setStatus",
)


def shows_text(call: Any) -> bool:
    """Does this call put answer text on screen (not the placeholder, not an empty stream start)?"""
    if call.error is not None:
        return False
    if call.method in ("chat.postMessage", "chat.update"):
        return (call.args.get("text") or "…") != "…"
    return bool(call.args.get("markdown_text"))


async def run(args: argparse.Namespace, native: bool) -> dict[str, Any]:
    delay = 1.0 / args.rate
    text = answer_text(args.tokens)
    results: list[dict[str, float]] = []
    with TimedOpenAI() as llm, FakeSlack() as slack, tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            overrides={
                **scratch_overrides(tmp, llm.base_url),
                "channels": {
                    "slack": {
                        "enabled": True,
                        "bot_token": slack.bot_token,
                        "app_token": slack.app_token,
                        "api_base_url": slack.api_url,
                        "edit_interval_seconds": args.interval,
                        "native_streaming": native,
                    }
                },
            },
            env={},
        )
        channel = SlackChannel(settings.channels.slack, settings=settings)
        async with Harness.running(settings, channels={"slack": channel}) as harness:  # type: ignore[dict-item]
            await slack.wait_connected()
            for index in range(args.answers + 1):  # the first answer warms imports up and is not counted
                user = f"UBENCH{index}"
                dm = f"CBENCH{index}"  # a channel: the answer goes into the thread under the mention
                llm.script(Reply(text=text, chunk_size=4, delay=delay))
                before = len(llm.completions)
                started = time.time()
                slack.mention(dm, user, "write me a long answer")
                await slack.wait_for(lambda n=before: len(llm.completions) > n, 60, "the model call")
                await slack.wait_for(
                    lambda dm=dm: any(m.text.endswith(text[-30:]) for m in slack.channel_messages(dm)),
                    args.tokens / args.rate + 60,
                    "the final text",
                )
                await harness.idle(timeout=60)
                request_at = next(
                    r["at"] for r in reversed(llm.requests) if r.get("path") == "/v1/chat/completions"
                )
                first_token = request_at + delay
                calls = [
                    c
                    for c in slack.calls
                    if c.method in REPLY_METHODS and (c.args.get("channel") or c.args.get("channel_id")) == dm
                ]
                visible = next(c.at for c in calls if shows_text(c))
                if index == 0:
                    continue
                results.append(
                    {
                        "calls": len(calls),
                        "posts": sum(c.method == "chat.postMessage" for c in calls),
                        "updates": sum(c.method == "chat.update" for c in calls),
                        "streams": sum(c.method.endswith("Stream") for c in calls),
                        "messages": len(slack.channel_messages(dm)),
                        "first_visible_s": visible - first_token,
                        "total_s": time.time() - started,
                    }
                )
    return {
        "answers": results,
        "calls_mean": statistics.mean(r["calls"] for r in results),
        "first_visible_mean_s": statistics.mean(r["first_visible_s"] for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0, help="model tokens per second")
    parser.add_argument("--interval", type=float, default=EDIT_INTERVAL, help="edit_interval_seconds")
    parser.add_argument("--mode", choices=("native", "edit", "both"), default="both")
    args = parser.parse_args(argv)
    modes = ("native", "edit") if args.mode == "both" else (args.mode,)
    for mode in modes:
        report = asyncio.run(run(args, mode == "native"))
        print(
            f"slack stream, {mode} path: {args.answers} answers × {args.tokens} tokens at {args.rate:g} tok/s, "
            f"interval {args.interval:g}s, text limit {TEXT_LIMIT}"
        )
        for i, r in enumerate(report["answers"], 1):
            print(
                f"  answer {i}: {r['calls']} API calls ({r['posts']} postMessage + {r['updates']} update + "
                f"{r['streams']} stream) in {r['messages']} message(s); first visible text "
                f"{r['first_visible_s'] * 1000:.0f} ms after the first token; {r['total_s']:.1f}s total"
            )
        print(
            f"mean: {report['calls_mean']:.1f} API calls per answer; "
            f"{report['first_visible_mean_s'] * 1000:.0f} ms first token → first visible text"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
