"""A group's calls share its cap (Bot FAQ: about 20 messages a minute per group), and a final goes first.

Two reply chains in one group are two conversations answered at once, drawing on the same group cap.
A short answer that finishes while the other is still streaming must not wait behind that stream's
paced edits: it is asked right after a group slot was used, its answer is ready long before the next
slot (two seconds away), and that slot is its final's — ahead of the long answer's edit that was
already waiting. Being ready before its placeholder could go out, it is one message with no "…"
(docs/channels.md, "The reply stream").

The long answer streams for about 9 s, so it is still being written when the short final is due; the
test checks that precondition (a long answer that had finished too would rightly send its own final
first, both being finals).
"""

from __future__ import annotations

from typing import Any

import pytest

from channels.telegram.channel import TelegramChannel
from config.schema import Settings
from tests.fakes.openai_server import Reply
from tests.fakes.telegram import FakeTelegram

from .conftest import BOT_USERNAME, telegram_config

GROUP = -1005550
#: A slow group cap (one call per 2 s), so the long answer always has an edit waiting for it.
GROUP_INTERVAL = 2.0
LONG = " ".join(f"long{i}" for i in range(160))  # 147 chunks of 8 characters
#: Seconds per chunk of the long answer: about 9 s of streaming, twice the short answer's worst wait.
LONG_DELAY = 0.06
SHORT = "the short answer"


@pytest.fixture
def tg_channel(tg: FakeTelegram, tg_settings: Settings) -> TelegramChannel:
    return TelegramChannel(
        telegram_config(tg, group_edit_interval_seconds=GROUP_INTERVAL), settings=tg_settings
    )


def reply_calls(tg: FakeTelegram) -> list[dict[str, Any]]:
    return [
        c
        for c in tg.calls()
        if c["method"] in ("sendMessage", "editMessageText")
        and int(c["params"].get("chat_id") or 0) == GROUP
        and c["status"] == 200
    ]


@pytest.mark.slow
async def test_a_group_final_goes_ahead_of_the_other_answers_pending_edit(tg: FakeTelegram, tg_harness, llm):
    llm.script(Reply(text=LONG, chunk_size=8, delay=LONG_DELAY), Reply(text=SHORT, chunk_size=100))
    tg.user_message(GROUP, f"@{BOT_USERNAME} write a long story", chat_type="supergroup")
    # The first words are on screen: the long answer's pump now always has an edit waiting.
    await tg.wait_until(lambda: any("long0" in m.text for m in tg.bot_messages(GROUP)), timeout=30)
    used = len(reply_calls(tg))
    await tg.wait_until(lambda: len(reply_calls(tg)) > used, timeout=30)  # a slot was just used
    asked = len(reply_calls(tg))

    tg.user_message(GROUP, f"@{BOT_USERNAME} and a short one", chat_type="supergroup", user_id=1002)
    short = await tg.wait_for_bot_text(GROUP, SHORT, timeout=30)
    (_, long_finished), (_, short_finished) = llm.completion_times
    assert short_finished is not None
    assert long_finished is None, "the long answer must still be streaming when the short final is sent"
    await tg.wait_for_bot_text(GROUP, "long159", timeout=60)
    await tg_harness.idle()

    calls = reply_calls(tg)
    sends = [c for c in calls if c["method"] == "sendMessage"]
    assert len(sends) == 2, "one message per answer"
    assert short.history == [SHORT]  # ready before its placeholder's slot: no "…" first
    next_call = calls[asked]
    assert (next_call["method"], next_call["params"].get("text")) == ("sendMessage", SHORT), (
        "the short answer's final waited behind the long answer's edit"
    )
    assert sorted(tg.bot_texts(GROUP)) == sorted([LONG, SHORT])
