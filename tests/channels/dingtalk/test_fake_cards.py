"""The fake's AI card API refuses what DingTalk refuses, so the channel tests above prove something.

Each case is a request the real card API answers with an error (see tests/fakes/dingtalk.py for where
each rule comes from); a channel that sent it would leave the user with a broken or missing card.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from tests.fakes.dingtalk import FakeDingTalk


@asynccontextmanager
async def _client(fake: FakeDingTalk) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=fake.url) as client:
        answer = await client.post(
            "/v1.0/oauth2/accessToken", json={"appKey": fake.client_id, "appSecret": fake.client_secret}
        )
        client.headers["x-acs-dingtalk-access-token"] = answer.json()["accessToken"]
        yield client


async def _card(client: httpx.AsyncClient, track: str, **extra: Any) -> httpx.Response:
    body = {
        "cardTemplateId": "t.schema",
        "outTrackId": track,
        "cardData": {"cardParamMap": {"content": "…", "flowStatus": "1"}},
        "callbackType": "STREAM",
        **extra,
    }
    return await client.post("/v1.0/card/instances", json=body)


def _stream(track: str, **overrides: Any) -> dict[str, Any]:
    body = {
        "outTrackId": track,
        "guid": "g-1",
        "key": "content",
        "content": "hello",
        "isFull": True,
        "isFinalize": False,
        "isError": False,
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


async def test_card_variables_must_be_strings_and_flow_status_one_of_the_ai_card_states(fake_dingtalk):
    async with _client(fake_dingtalk) as client:
        numeric = await _card(client, "a", cardData={"cardParamMap": {"flowStatus": 1}})
        unknown = await _card(client, "b", cardData={"cardParamMap": {"flowStatus": "9"}})
        good = await _card(client, "c")
        bad_update = await client.put(
            "/v1.0/card/instances", json={"outTrackId": "c", "cardData": {"cardParamMap": {"flowStatus": 2}}}
        )
    assert (numeric.status_code, unknown.status_code, good.status_code) == (400, 400, 200)
    assert bad_update.status_code == 400
    assert fake_dingtalk.cards["c"].flow == ["1"]


@pytest.mark.parametrize("missing", ["guid", "key", "content", "isFull", "isFinalize", "isError"])
async def test_a_streaming_update_needs_every_field(fake_dingtalk, missing):
    async with _client(fake_dingtalk) as client:
        await _card(client, "s")
        answer = await client.put("/v1.0/card/streaming", json=_stream("s", **{missing: None}))
    assert answer.status_code == 400 and missing in answer.json()["message"]


async def test_streaming_needs_a_stream_card_a_streamed_key_and_an_open_stream(fake_dingtalk):
    async with _client(fake_dingtalk) as client:
        await _card(client, "http-card", callbackType="HTTP")
        not_stream = await client.put("/v1.0/card/streaming", json=_stream("http-card"))
        await _card(client, "s")
        wrong_key = await client.put("/v1.0/card/streaming", json=_stream("s", key="msgContent"))
        closing = await client.put("/v1.0/card/streaming", json=_stream("s", isFinalize=True))
        after = await client.put("/v1.0/card/streaming", json=_stream("s", content="more"))
    assert not_stream.status_code == 500
    assert (wrong_key.status_code, closing.status_code, after.status_code) == (400, 200, 400)
    assert fake_dingtalk.cards["s"].text == "hello"


async def test_an_update_replaces_every_variable_unless_asked_to_update_by_key(fake_dingtalk):
    async with _client(fake_dingtalk) as client:
        await _card(client, "k")
        await client.put(
            "/v1.0/card/instances",
            json={
                "outTrackId": "k",
                "cardData": {"cardParamMap": {"flowStatus": "2"}},
                "cardUpdateOptions": {"updateCardDataByKey": True},
            },
        )
        kept = dict(fake_dingtalk.cards["k"].params)
        await client.put(
            "/v1.0/card/instances",
            json={"outTrackId": "k", "cardData": {"cardParamMap": {"flowStatus": "3"}}},
        )
    assert kept == {"content": "…", "flowStatus": "2"}
    assert fake_dingtalk.cards["k"].params == {"flowStatus": "3"}, "a whole-map update wipes the content"
    assert fake_dingtalk.cards["k"].flow == ["1", "2", "3"]


async def test_a_card_delivered_without_user_id_type_never_shows_up(fake_dingtalk):
    conversation = fake_dingtalk.p2p_conversation("alice")
    async with _client(fake_dingtalk) as client:
        await _card(client, "d")
        answer = await client.post(
            "/v1.0/card/instances/deliver",
            json={
                "outTrackId": "d",
                "openSpaceId": "dtv1.card//IM_ROBOT.alice",
                "imRobotOpenDeliverModel": {"spaceType": "IM_ROBOT"},
            },
        )
    assert answer.status_code == 200
    assert fake_dingtalk.bubbles(conversation) == []


async def test_a_delivery_reports_each_space_and_a_failed_space_shows_no_card(fake_dingtalk):
    # DingTalk answers the deliver call with HTTP 200 and says per space whether the card got there;
    # the old fake answered {"success": true} and showed the card whatever happened.
    fake_dingtalk.groups_without_robot.add("cid-gone")
    group = {"imGroupOpenDeliverModel": {"robotCode": fake_dingtalk.client_id}, "userIdType": 1}
    async with _client(fake_dingtalk) as client:
        await _card(client, "g1")
        refused = await client.post(
            "/v1.0/card/instances/deliver",
            json={"outTrackId": "g1", "openSpaceId": "dtv1.card//IM_GROUP.cid-gone", **group},
        )
        await _card(client, "g2")
        no_model = await client.post(
            "/v1.0/card/instances/deliver",
            json={"outTrackId": "g2", "openSpaceId": "dtv1.card//IM_GROUP.cid-team", "userIdType": 1},
        )
        await _card(client, "g3")
        shown = await client.post(
            "/v1.0/card/instances/deliver",
            json={"outTrackId": "g3", "openSpaceId": "dtv1.card//IM_GROUP.cid-team", **group},
        )
    [gone] = refused.json()["result"]
    assert refused.status_code == 200 and refused.json()["success"] is True
    assert gone["success"] is False and "not a member" in gone["errorMsg"] and gone["spaceId"] == "cid-gone"
    [missing] = no_model.json()["result"]
    assert missing["success"] is False and "robotCode" in missing["errorMsg"]
    [ok] = shown.json()["result"]
    assert ok == {"spaceType": "IM_GROUP", "spaceId": "cid-team", "success": True}
    assert fake_dingtalk.bubbles("cid-gone") == []
    assert [b.ref for b in fake_dingtalk.bubbles("cid-team")] == ["g3"]


BUTTONS = json.dumps([{"label": "Approve", "command": "/approve K7PX2M", "color": "blue"}])


async def test_a_button_list_must_be_a_json_array_of_buttons(fake_dingtalk):
    async with _client(fake_dingtalk) as client:
        not_json = await _card(client, "a", cardData={"cardParamMap": {"actions": "Approve"}})
        no_command = await _card(
            client, "b", cardData={"cardParamMap": {"actions": '[{"label": "Approve"}]'}}
        )
        good = await _card(client, "c", cardData={"cardParamMap": {"actions": BUTTONS}})
        removed = await client.put(
            "/v1.0/card/instances",
            json={
                "outTrackId": "c",
                "cardData": {"cardParamMap": {"actions": "[]"}},
                "cardUpdateOptions": {"updateCardDataByKey": True},
            },
        )
    assert (not_json.status_code, no_command.status_code, good.status_code) == (400, 400, 200)
    assert removed.status_code == 200 and fake_dingtalk.cards["c"].buttons == []


async def test_a_press_needs_a_shown_button_a_stream_card_and_an_app_subscribed_to_card_callbacks(card_rig):
    fake = card_rig.fake  # the channel runs without card_actions_key: it does not subscribe
    async with _client(fake) as client:
        for track, callback in (("stream", "STREAM"), ("http", "HTTP")):
            await _card(client, track, callbackType=callback, cardData={"cardParamMap": {"actions": BUTTONS}})
            await client.post(
                "/v1.0/card/instances/deliver",
                json={"outTrackId": track, "openSpaceId": "dtv1.card//IM_ROBOT.alice", "userIdType": 1},
            )
    with pytest.raises(LookupError):
        fake.press_button(fake.cards["stream"], "Deny", user_id="alice")
    with pytest.raises(RuntimeError, match="callbackType STREAM"):
        fake.press_button(fake.cards["http"], "Approve", user_id="alice")
    with pytest.raises(RuntimeError, match="did not subscribe"):
        fake.press_button(fake.cards["stream"], "Approve", user_id="alice")
    assert fake.presses == []
