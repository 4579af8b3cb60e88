"""kill -9 mid-answer after the second overflow message: the resumed answer continues in its messages.

Before every message of a reply was stored, the restart continued only the first one and sent the
overflow again: the chat showed chunks twice. (tests/channels/resume_kit.py has the scenario.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reliability_telegram import ServeProcess, write_config
from channels.telegram.channel import TEXT_LIMIT
from tests.channels.resume_kit import (
    QUESTION,
    answering,
    expected_messages,
    kill_after_second_overflow,
    resume_and_compare,
)
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram import FakeTelegram

from .conftest import BOT_USERNAME


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_kill_after_the_second_overflow_message_ends_like_an_uninterrupted_answer(tmp_path: Path):
    log = tmp_path / "serve.log"
    with (
        FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg,
        FakeOpenAI(answering(TEXT_LIMIT)) as llm,
    ):
        config = write_config(tmp_path, tg, llm)  # type: ignore[arg-type]
        service = ServeProcess(config, log)
        tg.user_message(71, QUESTION, user_id=71)  # type: ignore[attr-defined]
        kill_after_second_overflow(service, tmp_path, "71", log)
        at_kill = tg.bot_texts(71)  # type: ignore[attr-defined]
        assert len(at_kill) >= 3

        resume_and_compare(
            config, tmp_path, log, lambda: tg.user_message(72, QUESTION, user_id=72), ("71", "72")
        )  # type: ignore[attr-defined]

        resumed, uninterrupted = tg.bot_messages(71), tg.bot_messages(72)  # type: ignore[attr-defined]
    assert [m.text for m in uninterrupted] == expected_messages(TEXT_LIMIT)
    assert [m.text for m in resumed] == [m.text for m in uninterrupted], "no chunk twice, none missing"
    assert all(m.buttons == [] for m in resumed), "no Stop button left on a finished answer"
