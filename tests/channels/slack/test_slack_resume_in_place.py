"""kill -9 mid-answer on Slack: the resumed answer continues in its messages (chat.update), none twice.

Before, only the first message was stored: after a kill among the overflow messages they were posted
again. (tests/channels/resume_kit.py has the shared scenario.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reliability_telegram import ServeProcess, wait_for
from channels.slack.channel import TEXT_LIMIT
from tests.channels.resume_kit import (
    QUESTION,
    answering,
    expected_messages,
    kill_after_second_overflow,
    resume_and_compare,
    write_config,
)
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack import FakeSlack


def slack_yaml(slack: FakeSlack) -> str:
    return (
        f"  slack: {{enabled: true, bot_token: '{slack.bot_token}', app_token: '{slack.app_token}', "
        f"api_base_url: '{slack.api_url}', edit_interval_seconds: 0.05, ping_interval_seconds: 5, "
        "native_streaming: false, trust: {members: ['*']}}\n"
    )


def ask(slack: FakeSlack, user: str) -> None:
    assert wait_for(lambda: slack.connected > 0, timeout=60), "the service connected"
    slack.dm(user, QUESTION)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_kill_after_the_second_overflow_message_ends_like_an_uninterrupted_answer(tmp_path: Path):
    log = tmp_path / "serve.log"
    with FakeSlack() as slack, FakeOpenAI(answering(TEXT_LIMIT)) as llm:
        config = write_config(tmp_path, llm, slack_yaml(slack))
        service = ServeProcess(config, log)
        ask(slack, "U0ALICE")
        kill_after_second_overflow(service, tmp_path, "DU0ALICE", log)
        assert len(slack.channel_messages("DU0ALICE")) >= 3

        resume_and_compare(config, tmp_path, log, lambda: ask(slack, "U0BOB"), ("DU0ALICE", "DU0BOB"))
        resumed = slack.channel_messages("DU0ALICE")
        uninterrupted = slack.channel_messages("DU0BOB")
    assert [m.text for m in uninterrupted] == expected_messages(TEXT_LIMIT)
    assert [m.text for m in resumed] == [m.text for m in uninterrupted], "no chunk twice, none missing"
    assert all(m.buttons == [] for m in resumed), "no Stop button left on a finished answer"
