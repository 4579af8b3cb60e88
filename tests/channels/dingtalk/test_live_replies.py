"""What a DingTalk user sees while an answer is still being written: the AI card's states, or a notice.

The AI card's ``flowStatus`` drives the card's own UI (spinner, typing effect, done, error), so a card left
in "processing" or "inputing" looks like a bot that never finished. Without a card template nothing can
be edited in place, so a long turn gets one "working on it" message instead of silence.
"""

from __future__ import annotations

import pytest

from channels.dingtalk.reply import PROGRESS_TEXT
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.slow  # a whole service + fake DingTalk per test

ANSWER = "The nightly backup finished at 03:12 and all 14 volumes verified."
PROCESSING, INPUTING, FINISHED, FAILED = "1", "2", "3", "5"


async def test_an_ai_card_goes_processing_then_inputing_then_finished(card_rig, llm):
    llm.script(Reply(text=ANSWER, chunk_size=4, delay=0.02))
    card_rig.fake.send_bot_message("1", "backup status?", sender_id="alice")

    card = await card_rig.wait_text(card_rig.p2p("alice"), ANSWER)
    await card_rig.harness.idle()

    assert card.flow == [PROCESSING, INPUTING, FINISHED]
    assert card.params["content"] == ANSWER, "the finished card must keep the whole answer"
    # The card is switched to "inputing" before the first streamed text, as AICardReplier does.
    calls = [c for c in card_rig.fake.requests if c["path"].startswith("/v1.0/card/")]
    first_stream = next(i for i, c in enumerate(calls) if c["path"] == "/v1.0/card/streaming")
    updates = [i for i, c in enumerate(calls) if c["method"] == "PUT" and c["path"] == "/v1.0/card/instances"]
    assert updates[0] < first_stream
    assert calls[updates[0]]["body"]["cardData"]["cardParamMap"] == {"flowStatus": INPUTING}


async def test_a_group_card_reaches_the_group_and_finishes(card_rig, llm):
    card_rig.fake.send_bot_message("2", "ping", sender_id="bob", conversation_id="cid-ops", at_bot=True)

    card = await card_rig.wait_text("cid-ops", "echo: ping")
    await card_rig.harness.idle()

    assert card.kind == "card" and card.flow[0] == PROCESSING and card.flow[-1] == FINISHED


async def test_a_card_that_breaks_is_marked_failed_and_the_answer_arrives_as_markdown(card_rig, llm):
    card_rig.fake.fail_next("/v1.0/card/streaming", status=400, times=1000)
    llm.script(Reply(text=ANSWER, chunk_size=8, delay=0.02))
    card_rig.fake.send_bot_message("1", "backup status?", sender_id="alice")

    await card_rig.wait_text(card_rig.p2p("alice"), ANSWER)
    await card_rig.harness.idle()

    card, answer = card_rig.visible(card_rig.p2p("alice"))
    assert answer.kind == "markdown" and answer.text == ANSWER
    assert card.flow == [PROCESSING, INPUTING, FAILED], "a broken card must not look like it is still typing"


async def test_without_a_template_a_slow_answer_gets_one_progress_message_first(start_rig, llm):
    rig = await start_rig("markdown", progress_notice_after_seconds=0.3)
    llm.script(Reply(text=ANSWER, chunk_size=4, delay=0.08))  # ~1.3 s of streaming
    rig.fake.send_bot_message("1", "backup status?", sender_id="alice")

    await rig.wait_text(rig.p2p("alice"), ANSWER)
    await rig.harness.idle()

    assert rig.final_texts(rig.p2p("alice")) == [PROGRESS_TEXT, ANSWER]


async def test_without_a_template_the_progress_message_also_comes_while_no_text_arrives(start_rig, llm):
    rig = await start_rig("markdown", progress_notice_after_seconds=0.3)
    llm.script(Reply(text=ANSWER, chunk_size=len(ANSWER), delay=1.5))  # silence, then the whole answer
    rig.fake.send_bot_message("1", "backup status?", sender_id="alice")

    notice = await rig.wait_text(rig.p2p("alice"), PROGRESS_TEXT, timeout=1.4)
    assert not any(ANSWER in t for t in rig.final_texts(rig.p2p("alice")))
    assert notice.kind == "markdown"

    await rig.wait_text(rig.p2p("alice"), ANSWER)
    await rig.harness.idle()
    assert rig.final_texts(rig.p2p("alice")) == [PROGRESS_TEXT, ANSWER]


async def test_without_a_template_a_quick_answer_or_a_disabled_notice_is_one_message(start_rig, llm):
    rig = await start_rig("markdown", progress_notice_after_seconds=None)
    llm.script(Reply(text=ANSWER, chunk_size=4, delay=0.08))
    rig.fake.send_bot_message("1", "backup status?", sender_id="alice")

    await rig.wait_text(rig.p2p("alice"), ANSWER)
    await rig.harness.idle()

    assert rig.final_texts(rig.p2p("alice")) == [ANSWER]
