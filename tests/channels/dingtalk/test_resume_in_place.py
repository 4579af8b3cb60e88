"""kill -9 mid-answer on DingTalk: the resumed answer continues in its AI cards and finishes every one.

Before, only the first card was stored: after a kill among the overflow cards, a chunk was sent again as
a new card and the old overflow card stayed "processing"/"inputing" forever. The stored state now holds
every card and its flowStatus. (tests/channels/resume_kit.py has the shared scenario.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reliability_telegram import ServeProcess, wait_for
from channels.dingtalk.channel import TEXT_LIMIT
from tests.channels.dingtalk.conftest import TEMPLATE
from tests.channels.resume_kit import (
    QUESTION,
    answering,
    expected_messages,
    kill_after_second_overflow,
    resume_and_compare,
    write_config,
)
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.openai_server import FakeOpenAI

FINISHED = "3"


def dingtalk_yaml(fake: FakeDingTalk) -> str:
    return (
        f"  dingtalk: {{enabled: true, client_id: '{fake.client_id}', client_secret: '{fake.client_secret}', "
        f"api_base_url: '{fake.url}', oapi_base_url: '{fake.url}', edit_interval_seconds: 0.05, "
        f"card_template_id: '{TEMPLATE}', card_actions_key: actions, trust: {{members: ['*']}}}}\n"
    )


def ask(fake: FakeDingTalk, user: str) -> None:
    assert wait_for(lambda: fake.connected, timeout=60), "the service connected"
    fake.send_bot_message("1", QUESTION, sender_id=user)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_kill_after_the_second_overflow_card_ends_like_an_uninterrupted_answer(tmp_path: Path):
    log = tmp_path / "serve.log"
    with FakeDingTalk() as fake, FakeOpenAI(answering(TEXT_LIMIT)) as llm:
        config = write_config(tmp_path, llm, dingtalk_yaml(fake))
        service = ServeProcess(config, log)
        ask(fake, "alice")
        kill_after_second_overflow(service, tmp_path, "alice", log)
        at_kill = fake.card_bubbles(fake.p2p_conversation("alice"))
        assert len(at_kill) >= 3 and at_kill[-1].flow_status != FINISHED, "killed while the cards were live"

        resume_and_compare(config, tmp_path, log, lambda: ask(fake, "bob"), ("alice", "bob"))
        resumed = fake.bubbles(fake.p2p_conversation("alice"))
        uninterrupted = fake.bubbles(fake.p2p_conversation("bob"))
    assert [b.text for b in uninterrupted] == expected_messages(TEXT_LIMIT)
    assert [b.text for b in resumed] == [b.text for b in uninterrupted], "no chunk twice, none missing"
    assert all(b.kind == "card" for b in resumed), "no markdown fallback"
    assert [b.flow_status for b in resumed] == [FINISHED] * len(resumed), "no card left processing"
    assert all(b.buttons == [] for b in resumed), "no Stop button left on a finished answer"
