"""Benchmark: Bot API calls per streamed answer on Telegram, and how soon the user sees the first words.

Everything between the two fakes is real: FakeTelegram (Bot API on 127.0.0.1) ↔ python-telegram-bot ↔
TelegramChannel ↔ Service/manager/LangGraph ↔ FakeOpenAI, which streams ``--tokens`` tokens of about
4 characters at ``--rate`` tokens/s. The channel runs with its production pacing (1 s per call in a
private chat, 3 s in a group) unless ``--private-interval``/``--group-interval`` say otherwise.

For each answer it reports the reply's calls (sendMessage, editMessageText, sendMessageDraft and
sendChatAction in that chat), the time from the model's first token to the first call that carries
answer text (not the "…" placeholder), and the time from the first token to the final text. Private
chats run twice: the native path (drafts, then one sendMessage) and the edit path
(``private_drafts: false``); groups always edit.

Run:  python -m bench.stream_telegram --answers 3 --tokens 1000 --rate 50
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
from channels.telegram.channel import TelegramChannel
from config.channels.telegram import TelegramConfig
from config.loader import load_settings
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

for _name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_name, None)

PLACEHOLDER = "…"
REPLY_METHODS = ("sendMessage", "editMessageText", "sendMessageDraft", "sendChatAction")
#: (label, private_drafts, group)
MODES = (("private, draft", True, False), ("private, edit", False, False), ("group, edit", True, True))


class StampedOpenAI(FakeOpenAI):
    """Notes when each completion request arrived; the first token follows one chunk delay later."""

    def __init__(self) -> None:
        super().__init__()
        self.stream_ends: list[float] = []

    def record(self, entry: dict[str, Any]) -> None:
        super().record({**entry, "at": time.time()})

    async def _completions(self, request: Any) -> Any:
        response = await super()._completions(request)
        self.stream_ends.append(time.time())  # the model's last chunk has been written
        return response


def make_answer(tokens: int) -> str:
    """Prose of ``tokens`` four-character tokens, 16 per line."""
    words = [f"t{i % 1000:03d}" for i in range(tokens)]
    return "\n".join(" ".join(words[i : i + 16]) for i in range(0, tokens, 16))


async def one_answer(
    tg: FakeTelegram, llm: StampedOpenAI, chat_id: int, text: str, delay: float, group: bool, username: str
) -> dict[str, float]:
    requests_before = len(llm.requests)
    calls_before = len(tg.requests)
    prompt = f"@{username} go" if group else "go"
    tg.user_message(chat_id, prompt, chat_type="supergroup" if group else "private", user_id=abs(chat_id))
    last_word = text.split()[-1]
    await tg.wait_until(
        lambda: next((m for m in tg.bot_messages(chat_id) if m.text.rstrip().endswith(last_word)), None),
        timeout=300,
    )
    first_token_at = llm.requests[requests_before]["at"] + delay
    calls = [
        c
        for c in tg.calls()[calls_before:]
        if c["method"] in REPLY_METHODS and c["params"].get("chat_id") == chat_id
    ]
    visible = [
        c for c in calls if c["params"].get("text") not in (None, "", PLACEHOLDER) and c["status"] == 200
    ]
    finished_at = max(c["at"] for c in calls)
    return {
        "calls": float(len(calls)),
        "sends": float(sum(c["method"] == "sendMessage" for c in calls)),
        "drafts": float(sum(c["method"] == "sendMessageDraft" for c in calls)),
        "first_text_s": visible[0]["at"] - first_token_at,
        "final_s": finished_at - first_token_at,
        "stream_s": llm.stream_ends[-1] - first_token_at,
    }


async def run(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    delay = 1.0 / args.rate
    text = make_answer(args.tokens)
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in MODES}
    with StampedOpenAI() as llm, FakeTelegram() as tg, tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            overrides={
                **scratch_overrides(tmp, llm.base_url),
            },
            env={},
        )
        for number, (label, drafts, group) in enumerate(MODES):
            config = TelegramConfig(
                enabled=True,
                bot_token=tg.token,
                api_base_url=tg.url,
                edit_interval_seconds=args.private_interval,
                group_edit_interval_seconds=args.group_interval,
                poll_timeout_seconds=5,
                private_drafts=drafts,
            )
            channel = TelegramChannel(config, settings=settings)
            async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
                for index in range(args.answers):
                    llm.script(Reply(text=text, chunk_size=4, delay=delay))
                    chat_id = 5000 + 100 * number + index
                    chat_id = -chat_id if group else chat_id
                    result = await one_answer(tg, llm, chat_id, text, delay, group, tg.bot_username)
                    results[label].append(result)
                    await harness.idle(timeout=60)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--answers", type=int, default=3, help="answers per chat type")
    parser.add_argument("--tokens", type=int, default=1000, help="tokens per answer (about 4 chars each)")
    parser.add_argument("--rate", type=float, default=50.0, help="model speed, tokens per second")
    parser.add_argument("--private-interval", type=float, default=1.0, help="seconds between calls, private")
    parser.add_argument("--group-interval", type=float, default=3.0, help="seconds between calls, groups")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    print(
        f"Telegram: {args.answers} answer(s) per chat type, {args.tokens} tokens at {args.rate:g} tokens/s "
        f"(stream ≈ {args.tokens / args.rate:.0f} s); pacing {args.private_interval:g} s private, "
        f"{args.group_interval:g} s group; {os.cpu_count()} CPUs"
    )
    for kind, rows in results.items():
        calls = [r["calls"] for r in rows]
        first = [r["first_text_s"] for r in rows]
        final = [r["final_s"] for r in rows]
        print(
            f"  {kind:14s}: API calls per answer median {statistics.median(calls):.0f} "
            f"(min {min(calls):.0f}, max {max(calls):.0f}; sendMessage {statistics.median(r['sends'] for r in rows):.0f}, "
            f"sendMessageDraft {statistics.median(r['drafts'] for r in rows):.0f}); "
            f"first token → first visible text median {statistics.median(first):.2f} s "
            f"(max {max(first):.2f} s); first token → final text median {statistics.median(final):.2f} s "
            f"(the model's stream itself took {statistics.median(r['stream_s'] for r in rows):.2f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
