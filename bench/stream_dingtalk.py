"""Benchmark: DingTalk API calls per streamed answer, and how soon the user sees something and the text.

Everything between the two fakes is real: FakeDingTalk (stream gateway + OpenAPI on 127.0.0.1) ↔
dingtalk-stream ↔ DingTalkChannel ↔ Service/manager/LangGraph ↔ FakeOpenAI, which streams ``--tokens``
tokens of about 4 characters at ``--rate`` tokens/s. The channel runs with its production pacing (1 s per
card update, 3 s per markdown message) unless ``--interval`` says otherwise.

Two paths, one-to-one chats:

* ``card`` — ``card_template_id`` set: an AI card created (flowStatus processing), switched to inputing,
  streamed in place, finalised and set finished.
* ``markdown`` — no template: markdown messages through the session webhook, which cannot be edited, with
  the progress notice (``progress_notice_after_seconds``, default 5 s) before the final text.
* ``final`` — no template and ``progress_notice_after_seconds: null``: the final text only (the
  behaviour before the notice existed), to show what the notice costs.

Per answer it reports the reply's HTTP calls to DingTalk (card create/deliver/update/streaming, session
webhook, robot messages; token fetches are listed apart), the time from the model's first token to the
first thing the user sees (the card, or the progress notice), to the first answer text, and to the final
text, plus how long the final text lagged behind the model's last chunk.

Run:  python -m bench.stream_dingtalk --answers 3 --tokens 1000 --rate 50 [--mode card|markdown|final|all]
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
from channels.dingtalk.channel import DingTalkChannel
from config.loader import load_settings
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import Harness

for _name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_name, None)

PLACEHOLDER = "…"
REPLY_PATHS = ("/v1.0/card/", "/robot/sendBySession", "/v1.0/robot/oToMessages/batchSend")


class StampedOpenAI(FakeOpenAI):
    """Notes when each completion request arrived and when its stream ended."""

    def __init__(self) -> None:
        super().__init__()
        self.stream_ends: list[float] = []

    def record(self, entry: dict[str, Any]) -> None:
        super().record({**entry, "at": time.time()})

    async def _completions(self, request: Any) -> Any:
        response = await super()._completions(request)
        self.stream_ends.append(time.time())
        return response


def answer_text(tokens: int) -> str:
    """``tokens`` four-character tokens, in lines of 20, like a long prose answer."""
    words = [f"w{i % 100:02d}" for i in range(tokens)]
    return "\n".join(" ".join(words[i : i + 20]) for i in range(0, tokens, 20))


def _answer_text_in(call: dict[str, Any]) -> str:
    """The answer text a call puts on screen ('' for the placeholder, status changes and notices)."""
    body = call.get("body") or {}
    if call["path"] == "/v1.0/card/streaming":
        text = str(body.get("content", ""))
    elif call["path"] == "/robot/sendBySession":
        text = str((body.get("markdown") or {}).get("text", ""))
    else:
        return ""
    return "" if text.startswith(("⏳", PLACEHOLDER)) else text


async def run(args: argparse.Namespace, mode: str) -> list[dict[str, Any]]:
    delay = 1.0 / args.rate
    text = answer_text(args.tokens)
    results: list[dict[str, Any]] = []
    channel_cfg: dict[str, Any] = {"enabled": True, "edit_interval_seconds": args.interval}
    if mode == "card":
        channel_cfg["card_template_id"] = "bench-ai-card.schema"
    elif mode == "final":
        channel_cfg["progress_notice_after_seconds"] = None
    with StampedOpenAI() as llm, FakeDingTalk() as fake, tempfile.TemporaryDirectory() as tmp:
        channel_cfg.update(
            client_id=fake.client_id,
            client_secret=fake.client_secret,
            api_base_url=fake.url,
            oapi_base_url=fake.url,
        )
        settings = load_settings(
            overrides={
                **scratch_overrides(tmp, llm.base_url),
                "channels": {"dingtalk": channel_cfg},
            },
            env={},
        )
        channel = DingTalkChannel(settings.channels.dingtalk, settings=settings)
        async with Harness.running(settings, channels={"dingtalk": channel}) as harness:  # type: ignore[dict-item]
            await fake.wait_for(lambda: fake.connected and channel.status.state == "connected")
            for index in range(args.answers + 1):  # the first answer warms imports up and is not counted
                sender = f"bench{index}"
                conversation = fake.p2p_conversation(sender)
                llm.script(Reply(text=text, chunk_size=4, delay=delay))
                before_llm, before_calls = len(llm.completions), len(fake.requests)
                fake.send_bot_message("1", "write me a long answer", sender_id=sender)
                await fake.wait_for(lambda n=before_llm: len(llm.completions) > n, 60)

                def final(conv: str = conversation) -> bool:
                    shown = "\n".join(b.text for b in fake.bubbles(conv))
                    done = all(b.finalized for b in fake.card_bubbles(conv))
                    return shown.endswith(text[-30:]) and done

                await fake.wait_for(final, args.tokens / args.rate + 60)
                final_at = time.time()
                await harness.idle(timeout=60)
                if index == 0:
                    continue
                request_at = next(
                    r["at"] for r in reversed(llm.requests) if r.get("path") == "/v1/chat/completions"
                )
                first_token = request_at + delay
                calls = [c for c in fake.requests[before_calls:] if c["path"].startswith(REPLY_PATHS)]
                tokens = [c for c in fake.requests[before_calls:] if c["path"] == "/v1.0/oauth2/accessToken"]
                visible = [
                    c for c in calls if c["path"] in ("/v1.0/card/instances/deliver", "/robot/sendBySession")
                ]
                with_text = [c for c in calls if _answer_text_in(c)] or calls
                results.append(
                    {
                        "calls": len(calls),
                        "by_path": {
                            p: sum(c["path"] == p for c in calls) for p in sorted({c["path"] for c in calls})
                        },
                        "token_fetches": len(tokens),
                        "first_visible_s": visible[0]["at"] - first_token,
                        "first_text_s": with_text[0]["at"] - first_token,
                        "final_s": final_at - first_token,
                        "after_stream_s": final_at - llm.stream_ends[-1],
                        "bubbles": len(fake.bubbles(conversation)),
                    }
                )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0, help="model tokens per second")
    parser.add_argument(
        "--interval", type=float, default=None, help="edit_interval_seconds (default: production)"
    )
    parser.add_argument("--mode", choices=("card", "markdown", "final", "all"), default="all")
    args = parser.parse_args(argv)
    for mode in ("card", "markdown", "final") if args.mode == "all" else (args.mode,):
        results = asyncio.run(run(args, mode))
        print(f"dingtalk {mode} path: {args.answers} answers × {args.tokens} tokens at {args.rate:g} tok/s")
        for i, r in enumerate(results, 1):
            print(
                f"  answer {i}: {r['calls']} calls {r['by_path']} (+{r['token_fetches']} token) in "
                f"{r['bubbles']} bubble(s); first visible {r['first_visible_s']:.2f}s, first answer text "
                f"{r['first_text_s']:.2f}s, final {r['final_s']:.1f}s ({r['after_stream_s']:.1f}s after the stream)"
            )
        print(
            f"mean: {statistics.mean(r['calls'] for r in results):.1f} calls per answer; first visible "
            f"{statistics.mean(r['first_visible_s'] for r in results):.2f}s; first answer text "
            f"{statistics.mean(r['first_text_s'] for r in results):.2f}s; final "
            f"{statistics.mean(r['final_s'] for r in results):.1f}s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
