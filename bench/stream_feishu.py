"""Benchmark: what one streamed answer costs in Feishu API calls, and how soon the user sees text.

The whole chain is real except the two ends: FakeLark (open-platform HTTP + protobuf long connection on
127.0.0.1) ↔ lark-oapi ↔ FeishuChannel ↔ Service/manager/LangGraph ↔ FakeOpenAI streaming a scripted
answer of ``--tokens`` tokens (about 4 characters each) at ``--rate`` tokens per second.

Each answer is to a one-to-one message, on one of the two paths: the native CardKit card entity
(cards create + reply with the entity, element content …, settings; ``native_streaming: true``) or the
edit path (reply with a card + PATCH of the whole card; ``native_streaming: false``). Per answer it
reports the reply's API calls (IM message calls and CardKit calls; not the receipt reaction or token
fetches) and the time from the model's first token to the first call that shows answer text (not the
"…" placeholder). Calls are counted where they arrive, at the fake.
Run:  python -m bench.stream_feishu --answers 3 --tokens 1000 --rate 50 [--mode native|edit|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.settings import scratch_overrides
from channels.feishu.channel import TEXT_LIMIT, FeishuChannel
from config.channels.feishu import FeishuConfig
from config.loader import load_settings
from tests.fakes.feishu import FakeLark, render
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import Harness

for _var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_var, None)

DEFAULT_INTERVAL = FeishuConfig.model_fields["edit_interval_seconds"].default
SENDER = "ou_bench000000000000000000000001"


class TimedOpenAI(FakeOpenAI):
    """The fake model, stamping when each request arrived (its first token follows after one delay)."""

    def record(self, entry: dict[str, Any]) -> None:
        super().record({**entry, "at": time.time()})


def answer_text(tokens: int) -> str:
    """``tokens`` four-character tokens, in lines of 20, like a long prose answer."""
    words = [f"w{i % 100:02d}" for i in range(tokens)]
    lines = [" ".join(words[i : i + 20]) for i in range(0, tokens, 20)]
    return "\n".join(lines)


def is_reply_call(request: dict[str, Any]) -> bool:
    path = str(request["path"])
    if path.startswith("/open-apis/cardkit/"):
        return True
    return (
        path.startswith("/open-apis/im/v1/messages")
        and "/reactions" not in path
        and "/resources/" not in path
    )


def shows_text(request: dict[str, Any]) -> bool:
    """Does this call put answer text on screen (not the "…" placeholder, not a settings change)?"""
    body = request.get("json") or {}
    if request.get("injected") or not isinstance(body, dict):
        return False
    if str(request["path"]).endswith("/content"):  # CardKit element text
        return (body.get("content") or "…") != "…"
    if request["method"] == "PATCH" and "/im/v1/messages/" in request["path"]:
        return render("interactive", str(body.get("content") or "")) != "…"
    if request["method"] == "POST" and body.get("msg_type") in ("interactive", "text"):
        content = str(body.get("content") or "")
        if '"card_id"' in content:
            return False  # the entity was created with the placeholder
        return render(str(body["msg_type"]), content) not in ("", "…")
    return False


async def run(args: argparse.Namespace, native: bool) -> dict[str, Any]:
    delay = 1.0 / args.rate
    text = answer_text(args.tokens)
    results: list[dict[str, float]] = []
    with TimedOpenAI() as llm, FakeLark() as lark, tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            overrides={
                **scratch_overrides(tmp, llm.base_url),
                "channels": {
                    "feishu": {
                        "enabled": True,
                        "app_id": lark.app_id,
                        "app_secret": lark.app_secret,
                        "domain": lark.url,
                        "edit_interval_seconds": args.interval,
                        "native_streaming": native,
                        "receipt_reaction": "",
                    }
                },
            },
            env={},
        )
        channel = FeishuChannel(settings.channels.feishu, settings=settings)
        async with Harness.running(settings, channels={"feishu": channel}) as harness:  # type: ignore[dict-item]
            await lark.wait_for(lambda f: f.connected, 30)
            tail = text[-30:]
            for index in range(args.answers + 1):  # the first answer warms imports up and is not counted
                chat = f"oc_bench{index}"
                llm.script(Reply(text=text, chunk_size=4, delay=delay))
                before_requests = len(lark.requests)
                started = time.time()
                lark.send_message_event(chat, "p2p", SENDER, "write me a long answer")
                await lark.wait_for(
                    lambda f, c=chat: any(m.text.endswith(tail) for m in f.chat(c)),
                    args.tokens / args.rate + 60,
                )
                await harness.idle(timeout=60)
                request_at = next(
                    r["at"] for r in reversed(llm.requests) if r.get("path") == "/v1/chat/completions"
                )
                first_token = request_at + delay
                calls = [r for r in lark.requests[before_requests:] if is_reply_call(r)]
                visible = next(r["at"] for r in calls if shows_text(r))
                if index == 0:
                    continue
                messages = lark.chat(chat)
                results.append(
                    {
                        "calls": len(calls),
                        "cardkit": sum(str(r["path"]).startswith("/open-apis/cardkit/") for r in calls),
                        "patches": sum(r["method"] == "PATCH" and "/im/" in r["path"] for r in calls),
                        "posts": sum(r["method"] == "POST" and "/im/" in r["path"] for r in calls),
                        "messages": len(messages),
                        "versions": sum(len(m.history) for m in messages),
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--answers", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0, help="model tokens per second")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL, help="edit_interval_seconds")
    parser.add_argument("--mode", choices=("native", "edit", "both"), default="both")
    parser.add_argument("--json", action="store_true", help="also print each report as JSON")
    args = parser.parse_args(argv)
    modes = ("native", "edit") if args.mode == "both" else (args.mode,)
    for mode in modes:
        report = asyncio.run(run(args, mode == "native"))
        print(
            f"feishu stream, {mode} path: {args.answers} answers × {args.tokens} tokens at {args.rate:g} tok/s, "
            f"interval {args.interval:g}s, text limit {TEXT_LIMIT}"
        )
        for i, r in enumerate(report["answers"], 1):
            print(
                f"  answer {i}: {r['calls']} API calls ({r['posts']} IM post + {r['patches']} IM patch + "
                f"{r['cardkit']} CardKit) in {r['messages']} message(s), {r['versions']} versions shown; "
                f"first visible text {r['first_visible_s'] * 1000:.0f} ms after the first token; "
                f"{r['total_s']:.1f}s total"
            )
        print(
            f"mean: {report['calls_mean']:.1f} API calls per answer; "
            f"{report['first_visible_mean_s'] * 1000:.0f} ms first token → first visible text"
        )
        if args.json:
            print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
