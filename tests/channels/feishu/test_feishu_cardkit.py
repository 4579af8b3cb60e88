"""Feishu's native live reply: a CardKit card entity in streaming mode, and the ways back to patching.

The chain is the real one (FakeLark ↔ lark-oapi ↔ FeishuChannel ↔ Service/manager ↔ FakeOpenAI); the
fake's CardKit rules come from Feishu's pages for the three calls, not from our code.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from channels.errors import ChannelError
from channels.feishu.api import LarkApi
from tests.channels.feishu.conftest import ALICE, running_bot
from tests.fakes.feishu import FakeLark
from tests.fakes.openai_server import FakeOpenAI, Hold, Reply

pytestmark = pytest.mark.slow

P2P = "oc_p2p_alice"
WORDS = " ".join(f"word{i}" for i in range(40))


def cardkit_calls(lark: FakeLark) -> list[tuple[str, str]]:
    return [(r["method"], r["path"]) for r in lark.requests if r["path"].startswith("/open-apis/cardkit/")]


def sequences(lark: FakeLark) -> list[int]:
    return [
        r["json"]["sequence"]
        for r in lark.requests
        if r["path"].startswith("/open-apis/cardkit/v1/cards/") and not r.get("injected")
    ]


async def test_an_answer_streams_into_one_card_entity_that_ends_with_streaming_closed(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    llm.script(Reply(text=WORDS, chunk_size=8, delay=0.03))
    async with running_bot(tmp_path, llm, lark) as bot:
        event = lark.send_message_event(P2P, "p2p", ALICE, "talk to me")
        await lark.wait_for_text(P2P, "word39")
        await bot.harness.idle(timeout=30)

    [message] = lark.chat(P2P)
    assert message.reply_to == event["event"]["message"]["message_id"]
    assert message.text == WORDS
    assert message.history[0] == "…" and len(message.history) >= 3, "it filled in step by step"
    assert not message.streaming, "the chat list no longer shows it as being generated"
    [create] = [r for r in lark.requests if r["path"] == "/open-apis/cardkit/v1/cards"]
    card = json.loads(create["json"]["data"])
    assert create["json"]["type"] == "card_json"
    assert card["schema"] == "2.0" and card["config"]["streaming_mode"] is True
    [sent] = lark.calls("POST", "/reply")
    assert sent["json"]["msg_type"] == "interactive"
    assert json.loads(sent["json"]["content"]) == {"type": "card", "data": {"card_id": message.card_id}}
    calls = cardkit_calls(lark)
    assert calls[0] == ("POST", "/open-apis/cardkit/v1/cards")
    assert calls[-1] == ("PATCH", f"/open-apis/cardkit/v1/cards/{message.card_id}/settings")
    # The live Stop button is taken out of the entity before streaming closes.
    assert calls[-2] == ("DELETE", f"/open-apis/cardkit/v1/cards/{message.card_id}/elements/action_0")
    assert all(m == "PUT" and p.endswith("/elements/answer/content") for m, p in calls[1:-2])
    assert message.buttons == []
    seq = sequences(lark)
    assert seq == sorted(set(seq)) and seq[0] >= 1, "each call on the card has a larger sequence"
    assert lark.calls("PATCH", "/open-apis/im/v1/messages/") == [], "no whole-card patch was needed"


async def test_headings_quotes_and_tables_reach_the_card_as_json_2_markdown(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    answer = "# Plan\n\n> keep it short\n\n| step | owner |\n|---|---|\n| one | Alice |"
    for native in (True, False):
        async with running_bot(tmp_path / str(native), llm, lark, native_streaming=native) as bot:
            chat = f"oc_md_{native}"
            llm.script(Reply(text=answer, chunk_size=10, delay=0.02))
            lark.send_message_event(chat, "p2p", ALICE, "a plan please")
            await lark.wait_for_text(chat, "| one | Alice |")
            await bot.harness.idle(timeout=30)
            [message] = lark.chat(chat)
            shown = json.loads(message.contents[-1])
            assert shown["schema"] == "2.0", "only 2.0 cards render headings, quotes and tables"
            [element] = shown["body"]["elements"]
            assert element["tag"] == "markdown" and element["content"] == answer


async def test_an_at_tag_in_the_model_text_mentions_nobody_but_code_keeps_it_as_typed(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    answer = 'Hi <at id=all></at> and <AT user_id="ou_boss">boss</at>; the syntax is `<at id=all></at>`.'
    for native in (True, False):
        chat = f"oc_at_{native}"
        async with running_bot(tmp_path / str(native), llm, lark, native_streaming=native) as bot:
            llm.script(Reply(text=answer, chunk_size=6, delay=0.02))
            lark.send_message_event(chat, "p2p", ALICE, "greet everyone")
            await lark.wait_for_text(chat, "the syntax is")
            await bot.harness.idle(timeout=30)
            [message] = lark.chat(chat)
            assert message.text == answer, "the user reads the characters the model wrote"
            assert message.mentions == [], "nobody was pinged"
            assert "`<at id=all></at>`" in json.loads(message.contents[-1])["body"]["elements"][0]["content"]


async def test_when_cardkit_is_not_allowed_replies_are_cards_patched_in_place_without_asking_again(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    # 99991672: the app lacks the scope (cardkit:card:write) for this call.
    lark.fail_next("/open-apis/cardkit/v1/cards", method="POST", status=400, code=99991672)
    async with running_bot(tmp_path, llm, lark) as bot:
        llm.script(Reply(text=WORDS, chunk_size=8, delay=0.03))
        lark.send_message_event(P2P, "p2p", ALICE, "first")
        await lark.wait_for_text(P2P, "word39")
        await bot.harness.idle(timeout=30)
        lark.send_message_event(P2P, "p2p", ALICE, "second")
        await lark.wait_for_text(P2P, "echo: second")
        await bot.harness.idle(timeout=30)

    first, second = lark.chat(P2P)
    assert first.text == WORDS and first.history[0] == "…" and first.patches >= 1
    assert second.text == "echo: second"
    assert len(lark.calls("POST", "/open-apis/cardkit/v1/cards")) == 1, "the refusal was remembered"
    assert all(json.loads(m.contents[-1])["schema"] == "2.0" for m in (first, second))


async def test_when_streaming_text_is_refused_midway_the_same_card_is_patched_to_the_final_text(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    async with running_bot(tmp_path, llm, lark) as bot:
        llm.script(Reply(text=WORDS, chunk_size=4, delay=0.05))
        lark.send_message_event(P2P, "p2p", ALICE, "stream then stop")
        await lark.wait_for(lambda f: any(len(m.history) >= 2 for m in f.chat(P2P)))
        # 200860: the card grew past Feishu's 30 KB; this card cannot take the text any more.
        lark.fail_next("/elements/answer/content", method="PUT", status=400, code=200860, times=100)
        await lark.wait_for_text(P2P, "word39")
        await bot.harness.idle(timeout=30)
        lark.clear_failures()

    [message] = lark.chat(P2P)
    assert message.text == WORDS
    assert lark.calls("PATCH", f"/open-apis/im/v1/messages/{message.message_id}"), "patched in place"


async def test_when_closing_streaming_is_refused_the_final_card_is_patched_whole(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    # 300122: "Failed to update card configuration".
    lark.fail_next("/settings", method="PATCH", status=400, code=300122, times=10)
    async with running_bot(tmp_path, llm, lark) as bot:
        llm.script(Reply(text=WORDS, chunk_size=8, delay=0.03))
        lark.send_message_event(P2P, "p2p", ALICE, "finish please")
        await lark.wait_for(lambda f: f.calls("PATCH", "/open-apis/im/v1/messages/"), 30)
        await bot.harness.idle(timeout=30)
        lark.clear_failures()

    [message] = lark.chat(P2P)
    assert message.text == WORDS
    [patch] = lark.calls("PATCH", f"/open-apis/im/v1/messages/{message.message_id}")
    assert json.loads(patch["json"]["content"])["schema"] == "2.0"


async def test_a_card_whose_streaming_mode_timed_out_is_switched_on_again_and_finishes(
    tmp_path: Path, llm: FakeOpenAI
):
    # Feishu closes streaming mode 10 minutes after it was switched on; this fake does it after 1 s (not
    # much less: on a loaded machine the PUT right after switching it on again must land in time).
    with FakeLark(streaming_timeout=1.0) as lark:
        async with running_bot(tmp_path, llm, lark) as bot:
            # The answer stops mid-stream until streaming mode has certainly timed out, then goes on
            # (instead of an 8 s stream sized to outlast the timeout).
            hold = Hold()
            llm.script(Reply(text=WORDS, chunk_size=4, delay=0.03, hold=hold, hold_after_chunks=5))
            lark.send_message_event(P2P, "p2p", ALICE, "a long one")
            await asyncio.to_thread(hold.wait_for_waiting, 1)
            await asyncio.sleep(lark.streaming_timeout + 0.2)
            hold.open()
            await lark.wait_for_text(P2P, "word39", timeout=30)
            await bot.harness.idle(timeout=30)

        [message] = lark.chat(P2P)
        assert message.text == WORDS and not message.streaming
        settings = [json.loads(r["json"]["settings"]) for r in lark.calls("PATCH", "/settings")]
        assert {"config": {"streaming_mode": True}} in settings, "streaming was switched on again"
        assert settings[-1] == {"config": {"streaming_mode": False}}
        assert lark.calls("PATCH", "/open-apis/im/v1/messages/") == []


async def test_past_the_card_limit_the_first_card_closes_and_the_rest_follows_in_more_cards(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    lines = [" ".join(f"l{n}w{i}" for i in range(12)) for n in range(150)]  # about 9,000 characters
    answer = "\n".join(lines)
    llm.script(Reply(text=answer, chunk_size=300, delay=0.02))
    async with running_bot(tmp_path, llm, lark) as bot:
        lark.send_message_event(P2P, "p2p", ALICE, "a long one")
        await lark.wait_for_text(P2P, lines[-1])
        await bot.harness.idle(timeout=30)

    cards = lark.chat(P2P)
    assert len(cards) >= 2 and cards[0].card_id is not None and not cards[0].streaming
    assert "\n".join(c.text for c in cards).split() == answer.split(), "every word, once, in order"
    assert all(len(c.text) <= 6000 for c in cards)


async def test_a_card_busy_with_a_press_keeps_the_reply_on_cardkit(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark
):
    """200810 ("wait for the interaction to end and update again") is a pause, not a broken card."""
    async with running_bot(tmp_path, llm, lark) as bot:
        llm.script(Reply(text=WORDS, chunk_size=4, delay=0.05))
        lark.send_message_event(P2P, "p2p", ALICE, "stream through a press")
        await lark.wait_for(lambda f: any(len(m.history) >= 2 for m in f.chat(P2P)))
        lark.fail_next("/elements/answer/content", method="PUT", status=400, code=200810, times=3)
        await lark.wait_for_text(P2P, "word39")
        await bot.harness.idle(timeout=30)

    [message] = lark.chat(P2P)
    assert message.text == WORDS and not message.streaming and message.buttons == []
    assert lark.calls("PATCH", "/open-apis/im/v1/messages/") == [], "the reply left CardKit"
    seq = sequences(lark)
    assert seq == sorted(set(seq)), "each try used a new, larger sequence"


async def test_the_fake_refuses_what_feishu_refuses_for_cardkit(lark: FakeLark):
    """Feishu's documented refusals, through the SDK: a sequence that does not grow (300317), text for a
    card whose streaming was closed (300309), a 1.0 card (300303), and a card entity sent twice."""
    api = LarkApi(lark.app_id, lark.app_secret, lark.url)
    streaming = {"schema": "2.0", "config": {"streaming_mode": True}, "body": {"elements": []}}
    streaming["body"]["elements"] = [{"tag": "markdown", "element_id": "answer", "content": "…"}]
    card_id = await api.create_card(json.dumps(streaming))
    await api.stream_text(card_id, "answer", "one", 5)
    with pytest.raises(ChannelError, match="300317"):
        await api.stream_text(card_id, "answer", "two", 5)
    await api.card_settings(card_id, json.dumps({"config": {"streaming_mode": False}}), 6)
    with pytest.raises(ChannelError, match="300309"):
        await api.stream_text(card_id, "answer", "three", 7)
    with pytest.raises(ChannelError, match="300303"):
        await api.create_card(json.dumps({"config": {}, "elements": []}))
    lark.user_messages["om_user1"] = P2P
    entity = json.dumps({"type": "card", "data": {"card_id": card_id}})
    await api.reply("om_user1", "interactive", entity)
    with pytest.raises(ChannelError, match="230099"):
        await api.reply("om_user1", "interactive", entity)
