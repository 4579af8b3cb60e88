"""kill -9 mid-answer on Feishu: the resumed answer continues in its card and messages, and closes the card.

Before, only the first message was stored: after a kill among the overflow messages they were sent
again, and a kill while the CardKit card streamed left it to be PATCHed (its id and sequence were lost),
never closed through CardKit. (tests/channels/resume_kit.py has the shared scenario.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reliability_telegram import ServeProcess, wait_for
from channels.feishu.channel import TEXT_LIMIT
from channels.feishu.stream import SEQUENCE_BLOCK, SEQUENCE_MARGIN
from tests.channels.feishu.conftest import ALICE, BOB
from tests.channels.resume_kit import (
    QUESTION,
    answering,
    expected_messages,
    kill_after_second_overflow,
    resume_and_compare,
    stored_messages,
    write_config,
)
from tests.fakes.feishu import FakeLark, LarkMessage
from tests.fakes.openai_server import FakeOpenAI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
A, B = "oc_p2p_alice", "oc_p2p_bob"


def feishu_yaml(lark: FakeLark, interval: float) -> str:
    return (
        f"  feishu: {{enabled: true, app_id: '{lark.app_id}', app_secret: '{lark.app_secret}', "
        f"domain: '{lark.url}', edit_interval_seconds: {interval}, trust: {{members: ['*']}}}}\n"
    )


def ask(lark: FakeLark, chat: str, user: str) -> None:
    assert wait_for(lambda: lark.connected, timeout=60), "the service connected"
    lark.send_message_event(chat, "p2p", user, QUESTION)


def assert_closed(messages: list[LarkMessage]) -> None:
    assert not any(m.streaming for m in messages), "no card left streaming"
    assert all(m.buttons == [] for m in messages), "no Stop button left on a finished answer"


def test_a_kill_between_overflow_messages_sends_none_of_them_twice(tmp_path: Path):
    log = tmp_path / "serve.log"
    with FakeLark() as lark, FakeOpenAI(answering(TEXT_LIMIT)) as llm:
        # One card update a second: the overflow messages of the final go out a second apart, so the
        # kill after the second lands before the third.
        config = write_config(tmp_path, llm, feishu_yaml(lark, 1.0))
        service = ServeProcess(config, log)
        ask(lark, A, ALICE)
        kill_after_second_overflow(service, tmp_path, A, log)
        assert len(lark.chat(A)) >= 3

        resume_and_compare(config, tmp_path, log, lambda: ask(lark, B, BOB), (A, B))
        resumed, uninterrupted = lark.chat(A), lark.chat(B)
    assert [m.text for m in uninterrupted] == expected_messages(TEXT_LIMIT)
    assert [m.text for m in resumed] == [m.text for m in uninterrupted], "no chunk twice, none missing"
    assert_closed(resumed)


def test_a_kill_while_the_card_streams_continues_and_closes_the_same_card(tmp_path: Path):
    log = tmp_path / "serve.log"
    with (
        FakeLark() as lark,
        # Slow enough that the first card passes its first sequence block before it is full and rolls over.
        FakeOpenAI(answering(TEXT_LIMIT, pieces_per_message=200, seconds_per_message=24)) as llm,
    ):
        config = write_config(tmp_path, llm, feishu_yaml(lark, 0.05))
        service = ServeProcess(config, log)
        ask(lark, A, ALICE)

        def card_past_first_block() -> bool:
            messages = lark.chat(A)
            card = messages[0].card if messages else None
            moved = card is not None and card.sequence > SEQUENCE_BLOCK - SEQUENCE_MARGIN + 1
            return moved and stored_messages(tmp_path, A) == 1

        # Past the first move of the reserved sequence numbers: the store had to keep up with the card.
        assert wait_for(card_past_first_block, timeout=120), log.read_text()[-3000:]
        service.kill()
        [card_message] = lark.chat(A)
        assert card_message.streaming, "killed while the card streams"

        resume_and_compare(config, tmp_path, log, lambda: ask(lark, B, BOB), (A, B))
        resumed, uninterrupted = lark.chat(A), lark.chat(B)
    assert [m.text for m in resumed] == [m.text for m in uninterrupted] == expected_messages(TEXT_LIMIT)
    assert resumed[0].message_id == card_message.message_id, "the same message was continued"
    # Known limit (docs/channels/feishu.md): since cards roll over, the resumed card is closed by
    # patching the message, not through CardKit — the text is whole and nothing streams or keeps Stop.
    assert_closed(resumed)
