"""The fake Discord refuses what Discord refuses, so a channel test that passes against it proves something.

Each case here is a leniency the fake used to have (it accepted the call); the rules are Discord's
documented ones: message content at most 2,000 characters and embeds within their limits (400 code 50035
"Invalid Form Body", errors nested per field), an empty message is 400 code 50006, an unknown channel
404 code 10003, a channel the bot cannot see 403 code 50001, one it may not write in 403 code 50013;
Get Channel Messages takes ``limit`` 1-100 and one of ``before``/``after``/``around``, answers newest
first, and returns nothing (200, empty) without READ_MESSAGE_HISTORY.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.fakes.discord import FakeDiscord

USER = "4242"


@pytest.fixture
async def api(discord_fake: FakeDiscord) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bot {discord_fake.token}"}
    async with httpx.AsyncClient(base_url=discord_fake.api_base_url, headers=headers) as client:
        yield client


async def send(api: httpx.AsyncClient, channel: str, **body: Any) -> httpx.Response:
    return await api.post(f"/channels/{channel}/messages", json=body)


def field_error(response: httpx.Response, *path: str) -> str:
    node = response.json()["errors"]
    for part in path:
        node = node[part]
    return str(node["_errors"][0]["code"])


async def test_content_past_2000_characters_is_refused_on_send_and_edit(api, discord_fake):
    channel = discord_fake.channel_id
    ok = await send(api, channel, content="x" * 2000)
    assert ok.status_code == 200

    too_long = await send(api, channel, content="x" * 2001)
    assert (too_long.status_code, too_long.json()["code"]) == (400, 50035)
    assert field_error(too_long, "content") == "BASE_TYPE_MAX_LENGTH"

    edit = await api.patch(f"/channels/{channel}/messages/{ok.json()['id']}", json={"content": "y" * 2001})
    assert (edit.status_code, edit.json()["code"]) == (400, 50035)
    [message] = discord_fake.in_channel(channel)
    assert message.history == ["x" * 2000], "a refused edit changes nothing"


async def test_a_message_with_nothing_to_show_is_refused_with_50006(api, discord_fake):
    empty = await send(api, discord_fake.channel_id, content="")
    assert (empty.status_code, empty.json()["code"]) == (400, 50006)
    assert discord_fake.in_channel(discord_fake.channel_id) == []


async def test_embeds_are_held_to_discords_embed_limits(api, discord_fake):
    channel = discord_fake.channel_id
    eleven = await send(api, channel, embeds=[{"title": "t"}] * 11)
    assert field_error(eleven, "embeds") == "BASE_TYPE_MAX_LENGTH"
    long_title = await send(api, channel, embeds=[{"title": "t" * 257}])
    assert field_error(long_title, "embeds", "0", "title") == "BASE_TYPE_MAX_LENGTH"
    over_6000 = await send(api, channel, embeds=[{"description": "d" * 4000}, {"description": "d" * 2001}])
    assert field_error(over_6000, "embeds") == "MAX_EMBED_SIZE_EXCEEDED"
    fine = await send(api, channel, embeds=[{"title": "t" * 256, "description": "d" * 4096}])
    assert fine.status_code == 200


async def test_unknown_hidden_and_read_only_channels_answer_like_discord(api, discord_fake):
    unknown = await send(api, discord_fake.new_id(), content="hi")
    assert (unknown.status_code, unknown.json()["code"]) == (404, 10003)

    hidden = discord_fake.channel_id
    discord_fake.hidden_channels.add(hidden)
    assert (await send(api, hidden, content="hi")).json()["code"] == 50001
    history = await api.get(f"/channels/{hidden}/messages")
    assert (history.status_code, history.json()["code"]) == (403, 50001)

    discord_fake.hidden_channels.clear()
    discord_fake.read_only_channels.add(hidden)
    refused = await send(api, hidden, content="hi")
    assert (refused.status_code, refused.json()["code"]) == (403, 50013)


async def test_history_pages_newest_first_with_one_anchor_and_a_limit_of_1_to_100(api, discord_fake):
    dm = discord_fake.dm_channel(USER)
    ids = [discord_fake.message_create(dm, USER, f"m{i}")["id"] for i in range(5)]

    async def page(**query: Any) -> list[str]:
        response = await api.get(f"/channels/{dm}/messages", params=query)
        assert response.status_code == 200, response.text
        return [m["content"] for m in response.json()]

    assert await page() == ["m4", "m3", "m2", "m1", "m0"], "newest first, 50 by default"
    assert await page(after=ids[1], limit=2) == ["m3", "m2"], "the 2 right after the anchor, newest first"
    assert await page(before=ids[3], limit=2) == ["m2", "m1"]
    for bad in ({"limit": 0}, {"limit": 101}, {"after": ids[0], "before": ids[4]}):
        response = await api.get(f"/channels/{dm}/messages", params=bad)
        assert (response.status_code, response.json()["code"]) == (400, 50035), bad

    discord_fake.no_history_channels.add(dm)
    assert await page() == [], "without READ_MESSAGE_HISTORY Discord returns no messages"


async def test_a_limited_route_carries_its_bucket_headers_and_answers_429_with_retry_after(api, discord_fake):
    discord_fake.route_limits["send"] = (1, 60.0)
    first = await send(api, discord_fake.channel_id, content="one")
    assert first.status_code == 200
    assert (first.headers["X-RateLimit-Limit"], first.headers["X-RateLimit-Remaining"]) == ("1", "0")
    assert 0 < float(first.headers["X-RateLimit-Reset-After"]) <= 60

    second = await send(api, discord_fake.channel_id, content="two")
    assert second.status_code == 429
    body = second.json()
    assert body["global"] is False and 0 < body["retry_after"] <= 60
    assert second.headers["X-RateLimit-Scope"] == "user" and int(second.headers["Retry-After"]) >= 1
    assert [m.text for m in discord_fake.in_channel(discord_fake.channel_id)] == ["one"]


async def test_a_user_who_takes_no_dms_from_the_bot_is_403_code_50007(api, discord_fake):
    dm = discord_fake.dm_channel(USER)
    discord_fake.closed_dms.add(USER)
    refused = await send(api, dm, content="hello")
    assert (refused.status_code, refused.json()["code"]) == (403, 50007)
    assert discord_fake.in_channel(dm) == []
