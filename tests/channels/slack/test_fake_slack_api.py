"""The fake Slack refuses what Slack refuses, so a channel test that passes against it proves something.

Each case is a leniency the fake used to have, held now to docs.slack.dev: a method Slack does not have
is ``unknown_method``; ``chat.update`` of a message the bot did not post is ``cant_update_message``;
``chat.postMessage`` is limited per channel ("1 per second per channel, short bursts allowed") and the
Tier 2-4 methods per workspace, each refusal HTTP 429 ``ratelimited`` with ``Retry-After``; required
arguments missing are ``invalid_arguments`` / ``channel_not_found``; ``chat.postEphemeral`` holds
``text`` and ``blocks`` to the same limits as ``chat.postMessage``. The calls go through the real
slack_sdk client, as the channel makes them.
"""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack import FakeSlack


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)


async def refused(call) -> SlackApiError:  # type: ignore[no-untyped-def]
    with pytest.raises(SlackApiError) as caught:
        await call
    return caught.value


async def test_a_method_slack_does_not_have_is_unknown_method(client):
    error = await refused(client.api_call("chat.postMessages", json={"channel": "C1", "text": "hi"}))
    assert error.response["error"] == "unknown_method"
    assert error.response["req_method"] == "chat.postMessages"


async def test_chat_update_of_a_persons_message_is_cant_update_message(client, slack):
    person_ts = "1700000099.000099"
    slack.user_messages.add(("C1", person_ts))  # a message a person wrote in C1
    error = await refused(client.chat_update(channel="C1", ts=person_ts, text="rewritten"))
    assert error.response["error"] == "cant_update_message"
    missing = await refused(client.chat_update(channel="", ts=person_ts, text="x"))
    assert missing.response["error"] == "channel_not_found"


async def test_chat_post_message_is_limited_per_channel_with_429_and_retry_after(client, slack):
    slack.channel_limits["chat.postMessage"] = (3, 60.0)
    for i in range(3):
        await client.chat_postMessage(channel="C1", text=f"m{i}")
    error = await refused(client.chat_postMessage(channel="C1", text="one too many"))
    assert error.response.status_code == 429 and error.response["error"] == "ratelimited"
    assert 1 <= int(error.response.headers["Retry-After"]) <= 60
    await client.chat_postMessage(channel="C2", text="another channel has its own allowance")
    assert [m.text for m in slack.channel_messages("C1")] == ["m0", "m1", "m2"]


async def test_tier_limits_cover_every_method_the_channel_calls_per_workspace(client, slack):
    slack.method_limits["chat.postEphemeral"] = (1, 60.0)
    await client.chat_postEphemeral(channel="C1", user="U1", text="first")
    error = await refused(client.chat_postEphemeral(channel="C2", user="U1", text="second"))
    assert error.response.status_code == 429, "a Tier limit counts the workspace, not the channel"


async def test_required_arguments_of_the_upload_methods(client):
    no_length = await refused(client.files_getUploadURLExternal(filename="a.txt", length=None))  # type: ignore[arg-type]
    assert no_length.response["error"] == "invalid_arguments"
    no_files = await refused(client.api_call("files.completeUploadExternal", json={"channel_id": "C1"}))
    assert no_files.response["error"] == "invalid_arguments"


async def test_chat_post_ephemeral_holds_text_and_blocks_to_slacks_limits(client):
    too_long = await refused(client.chat_postEphemeral(channel="C1", user="U1", text="x" * 40_001))
    assert too_long.response["error"] == "msg_too_long"
    bad_blocks = [{"type": "actions", "elements": []}]
    invalid = await refused(client.chat_postEphemeral(channel="C1", user="U1", text="x", blocks=bad_blocks))
    assert invalid.response["error"] == "invalid_blocks"
