"""Slash commands (issue 15): answered through the command's response_url, private ones ephemerally.

Real Slack refuses ``chat.postMessage`` in a channel the bot has not joined (``not_in_channel``) and in a
DM between two people (``channel_not_found``); a slash command works in both, and its ``response_url``
is how the answer gets there. The fake counts and expires response_urls as Slack documents (5
responses, 30 minutes) and keeps ephemeral messages apart from what everyone sees.
"""

from __future__ import annotations

import logging

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from channels.errors import EditFailed
from channels.slack.api import SlackTransport
from channels.slack.respond import ResponseUrls, SlackResponseTransport
from channels.types import InboundMessage, Sender
from tests.channels.slack.conftest import running_bot
from tests.fakes.openai_server import Reply
from tests.fakes.slack import FakeSlack, ResponseUrl


def web_posts(slack: FakeSlack, channel: str) -> list[str]:
    """Successful chat.postMessage calls into ``channel``."""
    return [
        str(c.args.get("text"))
        for c in slack.calls_to("chat.postMessage")
        if c.args.get("channel") == channel and c.error is None
    ]


async def test_a_slash_command_in_a_channel_the_bot_has_not_joined_gets_its_answer(tmp_path, llm, slack):
    slack.not_joined.add("C9")
    async with running_bot(tmp_path, llm, slack) as bot:
        envelope = slack.slash_command("/switchboard", "new", user="U1", channel="C9")
        answer = await slack.wait_for_text("Started a new conversation", "C9")
        await bot.harness.idle(timeout=30)
    assert slack.acked(envelope)
    url = slack.response_url(envelope)
    assert [(r.response_type, r.error) for r in url.requests] == [("in_channel", None)]
    assert answer.text.startswith("Started a new conversation")
    assert not slack.calls_to("chat.postMessage")  # it would have been refused with not_in_channel


async def test_a_slash_command_in_a_dm_between_two_people_gets_its_answer(tmp_path, llm, slack):
    slack.foreign_dms.add("DPEOPLE")
    async with running_bot(tmp_path, llm, slack) as bot:
        slack.slash_command("/switchboard", "help", user="U1", channel="DPEOPLE")
        answer = await slack.wait_for_text("/status", "DPEOPLE")
        await bot.harness.idle(timeout=30)
    assert "/new" in answer.text
    assert not slack.calls_to("chat.postMessage")


async def test_status_by_slash_command_is_seen_only_by_the_person_who_asked(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack) as bot:
        envelope = slack.slash_command("/switchboard", "status", user="U1", channel="C1")
        await slack.wait_for(lambda: slack.ephemerals_for("U1", "C1"), what="the ephemeral /status answer")
        await bot.harness.idle(timeout=30)
    (private,) = slack.ephemerals_for("U1", "C1")
    assert private.via == "response_url"
    assert "Thread:" in private.text and "Model:" in private.text
    assert [r.response_type for r in slack.response_url(envelope).requests] == ["ephemeral"]
    assert slack.channel_messages("C1") == []  # nothing anyone else could read
    assert not slack.calls_to("chat.postMessage")


async def test_status_asked_with_a_mention_is_an_ephemeral_in_the_channel(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack) as bot:
        slack.mention("C1", "U1", "/status")
        await slack.wait_for(lambda: slack.ephemerals_for("U1", "C1"), what="the ephemeral /status answer")
        await bot.harness.idle(timeout=30)
    (private,) = slack.ephemerals_for("U1", "C1")
    assert private.via == "chat.postEphemeral"
    assert "Thread:" in private.text
    # The mention was top level: an ephemeral into a thread without replies would not be shown.
    assert private.thread_ts is None
    assert slack.channel_messages("C1") == []


async def test_where_slack_refuses_the_ephemeral_the_answer_goes_to_the_thread(tmp_path, llm, slack, caplog):
    slack.members["C1"] = {"U2"}  # the asker is not a member: chat.postEphemeral → user_not_in_channel
    async with running_bot(tmp_path, llm, slack) as bot:
        with caplog.at_level(logging.WARNING, logger="channels.slack.respond"):
            mention = slack.mention("C1", "U1", "/status")
            answer = await slack.wait_for_text("Thread:", "C1")
            await bot.harness.idle(timeout=30)
    assert [c.error for c in slack.calls_to("chat.postEphemeral")] == ["user_not_in_channel"]
    assert answer.thread_ts == mention["event"]["ts"]
    assert slack.ephemerals == []
    assert any("user_not_in_channel" in r.getMessage() for r in caplog.records)


async def test_switchboard_new_starts_a_fresh_conversation_like_typing_new(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack) as bot:
        slack.dm("U1", "remember the word pelican")
        await slack.wait_for_text("echo: remember the word pelican", "DU1")
        await bot.harness.idle(timeout=30)
        slack.slash_command("/switchboard", "new", user="U1", channel="DU1")
        await slack.wait_for_text("Started a new conversation", "DU1")
        await bot.harness.idle(timeout=30)
        slack.dm("U1", "what was the word?")
        await slack.wait_for_text("echo: what was the word?", "DU1")
        await bot.harness.idle(timeout=30)
    last = llm.completions[-1]
    assert "pelican" not in str(last["messages"])  # the history before /switchboard new is gone
    assert len(llm.completions) == 2  # the command itself never reached the model


async def test_switchboard_with_a_question_asks_the_agent_and_alone_shows_help(tmp_path, llm, slack):
    async with running_bot(tmp_path, llm, slack) as bot:
        slack.slash_command("/switchboard", "how are you?", user="U1", channel="C1")
        await slack.wait_for_text("echo: how are you?", "C1")
        slack.slash_command("/switchboard", "", user="U1", channel="C2")
        await slack.wait_for_text("/status", "C2")
        await bot.harness.idle(timeout=30)
    # Final text only through a response_url: each response spends one of its five uses.
    (answer,) = slack.channel_messages("C1")
    assert answer.history == ["echo: how are you?"]


async def test_an_individual_slash_command_from_an_older_manifest_still_works(tmp_path, llm, slack):
    slack.not_joined.add("C9")
    async with running_bot(tmp_path, llm, slack) as bot:
        slack.slash_command("/new", "", user="U1", channel="C9")
        await slack.wait_for_text("Started a new conversation", "C9")
        await bot.harness.idle(timeout=30)


async def test_an_answer_longer_than_five_responses_continues_with_chat_post_message(tmp_path, llm, slack):
    paragraphs = [f"Part {n}: " + "word " * 600 for n in range(1, 8)]  # ~3,000 characters each
    llm.script(Reply(text="\n\n".join(paragraphs)))
    async with running_bot(tmp_path, llm, slack) as bot:
        envelope = slack.slash_command("/switchboard", "write a long story", user="U1", channel="C1")
        await slack.wait_for_text("Part 7:", "C1")
        await bot.harness.idle(timeout=30)
    url = slack.response_url(envelope)
    assert url.uses == 5
    assert all(r.error is None for r in url.requests)  # the bot stopped at Slack's limit by itself
    shown = [m.text for m in slack.channel_messages("C1")]
    assert [text.split(":")[0] for text in shown] == [f"Part {n}" for n in range(1, 8)]
    posted = web_posts(slack, "C1")
    assert [text.split(":")[0] for text in posted] == ["Part 6", "Part 7"]


async def test_a_refused_response_url_falls_back_to_the_web_api(tmp_path, llm):
    with FakeSlack(response_url_ttl=0) as slack:  # every response_url already expired
        async with running_bot(tmp_path, llm, slack) as bot:
            envelope = slack.slash_command("/switchboard", "new", user="U1", channel="C1")
            await slack.wait_for_text("Started a new conversation", "C1")
            slack.slash_command("/switchboard", "status", user="U1", channel="C1")
            await slack.wait_for(lambda: slack.ephemerals_for("U1", "C1"), what="the /status answer")
            await bot.harness.idle(timeout=30)
        assert [r.error for r in slack.response_url(envelope).requests] == ["expired_url"]
        assert len(web_posts(slack, "C1")) == 1
        (private,) = slack.ephemerals_for("U1", "C1")
        assert private.via == "chat.postEphemeral"
        assert "Thread:" in private.text
        assert not any("Thread:" in m.text for m in slack.channel_messages("C1"))


async def test_when_nothing_can_post_the_log_says_the_bot_is_not_in_the_channel(tmp_path, llm, caplog):
    with FakeSlack(response_url_ttl=0) as slack:
        slack.not_joined.add("C9")
        # One run of the message: each further attempt takes the same path and only makes the test wait
        # for the bus's back-off before the dead letter. The refused reply itself is tried once.
        async with running_bot(tmp_path, llm, slack, settings_overrides={"bus": {"max_attempts": 1}}) as bot:
            with caplog.at_level(logging.DEBUG):
                envelope = slack.slash_command("/switchboard", "new", user="U1", channel="C9")
                await slack.wait_for(
                    lambda: any("not a member" in r.getMessage() for r in caplog.records),
                    what="the not-a-member warning",
                )
                await bot.harness.idle(timeout=60)
        secret = f"/response/{slack.response_url(envelope).key}"
    warning = next(r.getMessage() for r in caplog.records if "not a member" in r.getMessage())
    assert "C9" in warning and "not_in_channel" in warning and "/switchboard" in warning
    assert not any(secret in r.getMessage() for r in caplog.records)  # the response_url is never logged


async def test_an_edit_through_the_response_url_replaces_the_newest_answer_and_spends_a_use(slack):
    """The transport on its own, through the real AsyncWebhookClient, against the fake's response_url."""
    slack.response_urls["k1"] = ResponseUrl("k1", "C1", "U1", "/switchboard")
    message = InboundMessage(
        provider="slack",
        workspace="T0FAKE",
        chat="C1",
        sender=Sender("U1"),
        text="/new",
        platform_message_id="cmd-1",
        context={"response_url": f"{slack.url}/response/k1"},
    )
    state = ResponseUrls().for_message(message)
    assert state is not None
    web = SlackTransport(AsyncWebClient(token=slack.bot_token, base_url=slack.api_url), "C1", None)
    transport = SlackResponseTransport(state, "in_channel", web, channel="C1")
    first = await transport.send("draft")
    await transport.edit(first, "final")
    (shown,) = slack.channel_messages("C1")
    assert shown.history == ["draft", "final"]
    assert slack.response_urls["k1"].uses == 2
    assert [r.replace_original for r in slack.response_urls["k1"].requests] == [False, True]
    newest = ""
    for n in range(3):
        newest = await transport.send(f"more {n}")
    with pytest.raises(EditFailed):  # all five responses spent: the stream posts anew instead
        await transport.edit(newest, "too late")
    assert slack.response_urls["k1"].uses == 5
    assert len(slack.response_urls["k1"].requests) == 5  # no sixth request was even tried
