"""End to end: fake Lark ↔ real lark-oapi ↔ FeishuChannel ↔ Service/manager ↔ fake model.

Each test reads like what a Feishu user notices: cards that fill in, silence in groups unless @mentioned,
commands, files, one answer per message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.types import InboundMessage, Sender
from tests.channels.feishu.conftest import ALICE, BOB, running_bot
from tests.fakes.openai_server import Reply, last_user_text

pytestmark = pytest.mark.slow

P2P = "oc_p2p_alice"
GROUP = "oc_group_team"


def completions_about(llm, needle: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [c for c in llm.completions if needle in last_user_text(c)]


async def test_a_p2p_message_is_answered_by_one_card_patched_in_place_to_the_final_text(bot, llm):
    llm.script(Reply(text="Hello from the model, nice to meet you.", chunk_size=5, delay=0.02))
    event = bot.lark.send_message_event(P2P, "p2p", ALICE, "hi there")
    card = await bot.lark.wait_for_text(P2P, "nice to meet you.")
    await bot.harness.idle()
    [only] = bot.lark.chat(P2P)
    assert only is card
    assert only.msg_type == "interactive"
    assert only.reply_to == event["event"]["message"]["message_id"]
    assert only.history[0] == "…"  # the placeholder card the user sees first
    assert only.text == "Hello from the model, nice to meet you."
    assert only.patches >= 1
    await bot.lark.wait_for(lambda f: f.acks_for(event))
    assert [a["code"] for a in bot.lark.acks_for(event)] == [200]


async def test_each_accepted_message_gets_an_ok_reaction(bot):
    event = bot.lark.send_message_event(P2P, "p2p", ALICE, "react please")
    message_id = event["event"]["message"]["message_id"]
    await bot.lark.wait_for(lambda f: (message_id, "OK") in f.reactions)
    await bot.lark.wait_for_text(P2P, "echo: react please")


async def test_a_group_message_without_at_bot_is_ignored_and_with_at_bot_is_answered(bot, llm):
    quiet = bot.lark.send_message_event(GROUP, "group", ALICE, "just chatting among humans")
    await bot.lark.wait_for(lambda f: f.acks_for(quiet))
    bot.lark.send_message_event(GROUP, "group", ALICE, "what is two plus two?", mentions_bot=True)
    card = await bot.lark.wait_for_text(GROUP, "echo: what is two plus two?")
    await bot.harness.idle()
    assert bot.lark.chat(GROUP) == [card]
    assert not completions_about(llm, "among humans")
    # The @bot placeholder never reaches the model.
    assert all("@_user_1" not in last_user_text(c) for c in llm.completions)


async def test_a_reply_in_the_bots_reply_chain_continues_the_same_conversation(bot, llm):
    first = bot.lark.send_message_event(GROUP, "group", ALICE, "remember the word kiwi", mentions_bot=True)
    await bot.lark.wait_for_text(GROUP, "echo: remember the word kiwi")
    root = first["event"]["message"]["message_id"]
    bot.lark.send_message_event(GROUP, "group", BOB, "and now?", mentions_bot=True, root_id=root)
    await bot.lark.wait_for_text(GROUP, "echo: and now?")
    [request] = completions_about(llm, "and now?")
    history = " ".join(str(m.get("content")) for m in request["messages"])
    assert "kiwi" in history


async def test_an_at_bot_inside_a_topic_thread_is_answered_in_that_thread(bot):
    bot.lark.send_message_event(
        GROUP, "group", ALICE, "thread question", mentions_bot=True, root_id="om_root1", thread_id="omt_1"
    )
    card = await bot.lark.wait_for_text(GROUP, "echo: thread question")
    assert card.reply_in_thread


async def test_connect_code_from_the_connect_page_binds_the_feishu_account(bot):
    store = bot.harness.manager.connections
    assert store is not None
    issued = await store.create_code("alice", "feishu")
    bot.lark.send_message_event(P2P, "p2p", ALICE, f"/connect {issued.code}")
    answer = await bot.lark.wait_for_text(P2P, "Connected")
    assert "belongs to alice" in answer.text
    bot.lark.send_message_event(P2P, "p2p", ALICE, "/connect not-a-real-code")
    await bot.lark.wait_for_text(P2P, "invalid or expired")


async def test_connect_works_in_a_group_with_at_bot(bot):
    bot.lark.send_message_event(GROUP, "group", BOB, "/connect bogus", mentions_bot=True)
    await bot.lark.wait_for_text(GROUP, "invalid or expired")


# The two PATCH scenarios pin the edit path (native_streaming off); test_feishu_cardkit.py covers CardKit.
async def test_a_429_on_an_intermediate_patch_is_skipped_and_later_patches_and_the_final_text_land(
    tmp_path, llm, lark
):
    async with running_bot(tmp_path, llm, lark, native_streaming=False) as bot:
        words = " ".join(f"word{i}" for i in range(40))
        llm.script(Reply(text=words, chunk_size=6, delay=0.03))
        bot.lark.fail_next("/open-apis/im/v1/messages/om_bot", method="PATCH", status=429, retry_after=0.3)
        bot.lark.send_message_event(P2P, "p2p", ALICE, "count for me")
        card = await bot.lark.wait_for_text(P2P, "word39")
        await bot.harness.idle()
        assert card.text == words
        patches = bot.lark.calls("PATCH", "/open-apis/im/v1/messages/")
        limited = [i for i, p in enumerate(patches) if p.get("injected") == 429]
        assert len(limited) == 1
        assert any(not p.get("injected") for p in patches[limited[0] + 1 :])
        assert len(bot.lark.chat(P2P)) == 1


async def test_when_the_card_cannot_be_patched_the_final_text_arrives_as_a_plain_text_message(
    tmp_path, llm, lark
):
    async with running_bot(tmp_path, llm, lark, native_streaming=False) as bot:
        llm.script(Reply(text="The answer is forty-two.", chunk_size=4, delay=0.02))
        bot.lark.fail_next(
            "/open-apis/im/v1/messages/om_bot", method="PATCH", status=400, code=230011, times=50
        )
        bot.lark.send_message_event(P2P, "p2p", ALICE, "the question")
        await bot.lark.wait_for(lambda f: any(m.msg_type == "text" for m in f.chat(P2P)))
        await bot.harness.idle()
        bot.lark.clear_failures()
        [text_message] = [m for m in bot.lark.chat(P2P) if m.msg_type == "text"]
        assert text_message.text == "The answer is forty-two."


async def test_a_long_answer_is_split_into_several_cards_without_breaking_a_code_fence(bot, llm):
    prose = "".join(f"Paragraph {i}: some explanation that goes on for a while.\n" for i in range(100))
    code = "```python\n" + "".join(f"value_{i} = {i}\n" for i in range(250)) + "```\n"
    text = prose + code + "That is all."
    assert len(text) > 2 * 6000 - 3000
    llm.script(Reply(text=text, chunk_size=1500))
    bot.lark.send_message_event(P2P, "p2p", ALICE, "write a lot")
    await bot.lark.wait_for_text(P2P, "That is all.")
    await bot.harness.idle()
    cards = bot.lark.chat(P2P)
    assert len(cards) >= 2
    assert all(card.msg_type == "interactive" for card in cards)
    for card in cards:
        assert card.text.count("```") % 2 == 0, card.text[:200]
    joined = "\n".join(card.text for card in cards)
    assert all(f"value_{i} = {i}" in joined for i in range(250))
    assert all(f"Paragraph {i}:" in joined for i in range(100))


async def test_a_second_message_while_busy_shows_a_queued_card_that_becomes_its_answer(bot, llm):
    llm.script(Reply(text="slow first answer", chunk_size=2, delay=0.2))
    bot.lark.send_message_event(P2P, "p2p", ALICE, "first question")
    await bot.lark.wait_for(lambda f: len(f.chat(P2P)) == 1)
    bot.lark.send_message_event(P2P, "p2p", ALICE, "second question")
    second = await bot.lark.wait_for_text(P2P, "echo: second question")
    assert second.history[0].startswith("⏳ Queued")
    assert (await bot.lark.wait_for_text(P2P, "slow first answer")) is not second


async def test_a_file_sent_to_the_bot_lands_in_the_owners_uploads(bot, llm, tmp_path):
    bot.lark.send_file_event(P2P, "p2p", ALICE, "report.csv", b"a,b\n1,2\n")
    await bot.lark.wait_for(lambda f: f.chat(P2P) and "echo:" in f.chat(P2P)[0].text)
    await bot.harness.idle()
    stored = list(Path(bot.harness.settings.data_dir).glob("users/*/threads/*/user-data/uploads/report.csv"))
    assert len(stored) == 1
    assert stored[0].read_bytes() == b"a,b\n1,2\n"
    assert any("report.csv" in last_user_text(c) for c in llm.completions)


async def test_an_image_sent_to_the_bot_is_downloaded_too(bot, llm):
    bot.lark.send_file_event(P2P, "p2p", ALICE, "photo.png", b"\x89PNG fake", image=True)
    await bot.lark.wait_for(lambda f: f.chat(P2P) and "echo:" in f.chat(P2P)[0].text)
    await bot.harness.idle()
    uploads = list(Path(bot.harness.settings.data_dir).glob("users/*/threads/*/user-data/uploads/*.png"))
    assert [p.read_bytes() for p in uploads] == [b"\x89PNG fake"]


async def test_files_from_the_agent_are_uploaded_and_posted_in_the_chat(bot, tmp_path):
    event = bot.lark.send_message_event(P2P, "p2p", ALICE, "make me files")
    await bot.lark.wait_for_text(P2P, "echo: make me files")
    await bot.harness.idle()
    chart, notes = tmp_path / "chart.png", tmp_path / "notes.pdf"
    chart.write_bytes(b"\x89PNG chart")
    notes.write_bytes(b"%PDF-1.4 notes")
    message_id = event["event"]["message"]["message_id"]
    message = InboundMessage(
        provider="feishu",
        workspace=bot.lark.tenant_key,
        chat=P2P,
        sender=Sender(ALICE),
        text="make me files",
        platform_message_id=message_id,
        is_private=True,
        context={"message_id": message_id, "chat_id": P2P},
    )
    await bot.channel.open_reply(message).finish("Here are your files.", [chart, notes])
    kinds = [m.msg_type for m in bot.lark.chat(P2P)]
    assert kinds[-2:] == ["image", "file"]
    assert "Here are your files." in [m.text for m in bot.lark.chat(P2P)]
    assert sorted(bot.lark.uploads.values()) == sorted(
        [("chart.png", b"\x89PNG chart"), ("notes.pdf", b"%PDF-1.4 notes")]
    )


async def test_the_same_event_delivered_twice_is_answered_once(bot, llm):
    event = bot.lark.message_event(P2P, "p2p", ALICE, "only once please")
    bot.lark.push_event(event)
    bot.lark.push_event(event)
    await bot.lark.wait_for(lambda f: len(f.acks_for(event)) == 2)
    await bot.lark.wait_for_text(P2P, "echo: only once please")
    await bot.harness.idle()
    assert len(bot.lark.chat(P2P)) == 1
    assert len(completions_about(llm, "only once please")) == 1
    assert [a["code"] for a in bot.lark.acks_for(event)] == [200, 200]


async def test_new_status_and_help_commands_answer_in_the_chat(bot, llm):
    bot.lark.send_message_event(P2P, "p2p", ALICE, "/help")
    help_card = await bot.lark.wait_for_text(P2P, "/new")
    assert "/status" in help_card.text
    bot.lark.send_message_event(P2P, "p2p", ALICE, "/status")
    status = await bot.lark.wait_for_text(P2P, "Thread:")
    assert "Model: default" in status.text
    bot.lark.send_message_event(P2P, "p2p", ALICE, "/new")
    await bot.lark.wait_for_text(P2P, "Started a new conversation")
    await bot.harness.idle()
    assert not completions_about(llm, "/")


async def test_a_rich_text_post_reaches_the_model_as_plain_text_with_line_breaks(bot, llm):
    post = {
        "title": "Plan",
        "content": [
            [{"tag": "text", "text": "step one"}],
            [{"tag": "text", "text": "see "}, {"tag": "a", "text": "docs", "href": "https://example.com/d"}],
        ],
    }
    bot.lark.send_message_event(P2P, "p2p", ALICE, message_type="post", content=post)
    await bot.lark.wait_for(lambda f: f.chat(P2P) and "echo:" in f.chat(P2P)[0].text)
    [request] = completions_about(llm, "step one")
    assert "Plan\nstep one\nsee docs (https://example.com/d)" in last_user_text(request)


async def test_messages_from_apps_including_the_bot_itself_are_ignored(bot, llm):
    event = bot.lark.send_message_event(P2P, "p2p", bot.lark.bot_open_id, "my own words", sender_type="app")
    await bot.lark.wait_for(lambda f: f.acks_for(event))
    bot.lark.send_message_event(P2P, "p2p", ALICE, "a human speaks")
    await bot.lark.wait_for_text(P2P, "echo: a human speaks")
    await bot.harness.idle()
    assert not completions_about(llm, "my own words")
    assert len(bot.lark.chat(P2P)) == 1


async def test_senders_outside_allowed_users_are_told_no_but_can_still_connect(tmp_path, llm, lark):
    async with running_bot(tmp_path, llm, lark, allowed_users=[BOB]) as bot:
        bot.lark.send_message_event(P2P, "p2p", ALICE, "let me in")
        await bot.lark.wait_for_text(P2P, "not allowed")
        bot.lark.send_message_event(P2P, "p2p", ALICE, "/connect bogus-code")
        await bot.lark.wait_for_text(P2P, "invalid or expired")
        await bot.harness.idle()
        assert not completions_about(llm, "let me in")
