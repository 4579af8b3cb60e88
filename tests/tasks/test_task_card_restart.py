"""Issue 36: kill -9 of the service while a scheduled run's card says "running"; after the restart the
same card continues in place and the result arrives in the chat once.

Real ``python -m bot serve`` processes (bench/reliability_telegram.py's :class:`ServeProcess`) against
the Telegram fake and the fake model; the first is killed with SIGKILL mid-answer, so nothing of the
card's durability may rely on a clean stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.reliability_telegram import wait_for
from tests.channels import resume_kit
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply, last_user_text
from tests.fakes.slack import FakeSlack
from tests.tasks.kit import card_body, card_status, is_card
from tests.tasks.restart_kit import kill_while, restart_until, telegram_restart

pytestmark = pytest.mark.slow  # real `serve` processes

CHAT = 77
WHAT = "check every alert"
ANSWER = " ".join(f"alert{i}" for i in range(120))


def answering(request: dict[str, Any]) -> Reply:
    """The scheduled run's answer streams for about six seconds; anything else is echoed."""
    if last_user_text(request).strip() == WHAT:
        return Reply(text=ANSWER, chunk_size=10, delay=0.1)
    return echo_reply(request)


@pytest.mark.timeout(300)
def test_a_schedule_killed_mid_run_finishes_in_the_same_card_once_after_restart(tmp_path: Path):
    with telegram_restart(tmp_path, answering, CHAT) as chat:
        chat.kill_while(
            f"/schedule in 3s {WHAT}",
            running=lambda: any(
                card_status(m.text).startswith("▶️ Running") and "alert20" in m.text for m in chat.cards()
            ),
        )
        [before] = chat.cards()
        assert "✅ Done" not in before.text, "the kill came after the run had finished"

        chat.restart_until(lambda: any("✅ Done" in card_status(m.text) for m in chat.cards()))
        after = chat.cards()
        card_posts = chat.card_posts()
        everything = "\n".join(chat.texts())
    assert [m.message_id for m in after] == [before.message_id], "the same card, edited in place"
    assert card_posts == 1, "no second card was ever posted"
    assert card_body(after[0].text) == ANSWER
    assert everything.count("alert119") == 1, "the result arrived once"
    assert after[0].buttons == [], "no Stop button left on the finished card"


def slack_yaml(slack: FakeSlack) -> str:
    return (
        f"  slack: {{enabled: true, bot_token: '{slack.bot_token}', app_token: '{slack.app_token}', "
        f"api_base_url: '{slack.api_url}', edit_interval_seconds: 0.05, ping_interval_seconds: 5, "
        "trust: {members: ['*']}}\n"
    )


@pytest.mark.timeout(300)
def test_on_slack_a_schedule_killed_mid_run_finishes_in_the_same_card_once_after_restart(tmp_path: Path):
    """The same on Slack, with its native streaming left on (the default): a card never uses it."""
    log = tmp_path / "serve.log"
    with FakeSlack() as slack, FakeOpenAI(answering) as llm:
        config = resume_kit.write_config(tmp_path, llm, slack_yaml(slack))

        def start() -> None:
            assert wait_for(lambda: slack.connected > 0, timeout=60), log.read_text()[-3000:]
            slack.dm("U1", f"/schedule in 3s {WHAT}")

        kill_while(
            config,
            log,
            start,
            running=lambda: any(
                card_status(m.text).startswith("▶️ Running") and "alert20" in m.text
                for m in slack.channel_messages("DU1")
            ),
        )
        [before] = [m for m in slack.channel_messages("DU1") if is_card(m.text)]
        restart_until(config, log, lambda: "✅ Done" in card_status(before.text))
        after = [m for m in slack.channel_messages("DU1") if is_card(m.text)]
        posts = [c for c in slack.calls_to("chat.postMessage") if is_card(str(c.args.get("text", "")))]
        everything = "\n".join(m.text for m in slack.channel_messages("DU1"))
    assert after == [before], "the same card, updated in place"
    assert len(posts) == 1, "no second card was ever posted"
    assert card_body(before.text) == ANSWER
    assert everything.count("alert119") == 1, "the result arrived once"
    assert before.labels == [], "no Stop button left on the finished card"
