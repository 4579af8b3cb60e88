"""The Feishu fake refuses what Feishu's pages say Feishu refuses, and the channel stays inside those rules.

Each ``test_the_fake_…`` pins one rule the fake used to be lenient about (docs/testing.md lists them);
the rest show the channel keeping to it through the real chain (FakeLark ↔ lark-oapi ↔ FeishuChannel).
Raw HTTP is used where the channel itself would never break the rule.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from channels.feishu.api import LarkApi
from tests.channels.feishu.conftest import ALICE, running_bot
from tests.fakes.feishu import FakeLark
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.slow

P2P = "oc_p2p_alice"


@pytest.fixture
async def raw(lark: FakeLark) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client with a valid tenant token, for requests the channel would never make."""
    token = await LarkApi(lark.app_id, lark.app_secret, lark.url).tenant_token()
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=lark.url, headers=headers) as client:
        yield client


def card_json(*elements: dict[str, Any], streaming: bool = True) -> str:
    config = {"update_multi": True, "streaming_mode": streaming}
    return json.dumps({"schema": "2.0", "config": config, "body": {"elements": list(elements)}})


MARKDOWN = {"tag": "markdown", "element_id": "answer", "content": "…"}
GO = {
    "tag": "button",
    "element_id": "go",
    "text": {"tag": "plain_text", "content": "Go"},
    "behaviors": [{"type": "callback", "value": {"command": "/go"}}],
}


async def sent_card(raw: httpx.AsyncClient, lark: FakeLark, *elements: dict[str, Any]) -> str:
    """A streaming card entity with ``elements``, sent as a reply; returns its card_id."""
    created = await raw.post(
        "/open-apis/cardkit/v1/cards", json={"type": "card_json", "data": card_json(*elements)}
    )
    card_id = str(created.json()["data"]["card_id"])
    lark.user_messages["om_user1"] = P2P
    content = json.dumps({"type": "card", "data": {"card_id": card_id}})
    sent = await raw.post(
        "/open-apis/im/v1/messages/om_user1/reply", json={"msg_type": "interactive", "content": content}
    )
    assert sent.json()["code"] == 0
    return card_id


async def test_the_fake_allows_five_patches_of_one_message_a_second(raw: httpx.AsyncClient, lark: FakeLark):
    lark.user_messages["om_user1"] = P2P
    content = card_json(MARKDOWN, streaming=False)
    sent = await raw.post(
        "/open-apis/im/v1/messages/om_user1/reply", json={"msg_type": "interactive", "content": content}
    )
    message_id = sent.json()["data"]["message_id"]
    codes = [
        (await raw.patch(f"/open-apis/im/v1/messages/{message_id}", json={"content": content})).json()["code"]
        for _ in range(6)
    ]
    assert codes == [0, 0, 0, 0, 0, 230020], "单条消息更新频控为 5 QPS"


async def test_the_fake_allows_ten_calls_on_one_card_entity_a_second(raw: httpx.AsyncClient, lark: FakeLark):
    card_id = await sent_card(raw, lark, MARKDOWN)
    answers = []
    for sequence in range(1, 12):
        response = await raw.put(
            f"/open-apis/cardkit/v1/cards/{card_id}/elements/answer/content",
            json={"content": f"text {sequence}", "sequence": sequence},
        )
        answers.append((response.status_code, response.json()["code"]))
    assert answers[:10] == [(200, 0)] * 10
    assert answers[10] == (429, 99991400), "单个卡片实体…频率上限为 10 次/秒"


async def test_the_fake_checks_element_ids_in_nested_components_and_in_message_cards(
    raw: httpx.AsyncClient, lark: FakeLark
):
    nested = {
        "tag": "column_set",
        "columns": [
            {"tag": "column", "elements": [{"tag": "markdown", "element_id": "answer", "content": "x"}]}
        ],
    }
    duplicate = await raw.post(
        "/open-apis/cardkit/v1/cards", json={"type": "card_json", "data": card_json(MARKDOWN, nested)}
    )
    assert duplicate.json()["code"] == 300301, "element_id is unique in the whole card"
    lark.user_messages["om_user1"] = P2P
    for bad in ("1st", "has-dash", "a" * 21):
        content = card_json({"tag": "markdown", "element_id": bad, "content": "x"}, streaming=False)
        sent = await raw.post(
            "/open-apis/im/v1/messages/om_user1/reply", json={"msg_type": "interactive", "content": content}
        )
        assert sent.json()["code"] == 230099, bad
    card_id = await sent_card(raw, lark, MARKDOWN)
    too_long = await raw.put(
        f"/open-apis/cardkit/v1/cards/{card_id}/elements/{'a' * 21}/content",
        json={"content": "x", "sequence": 1},
    )
    assert too_long.json()["code"] == 10002


async def test_the_fake_requires_the_fields_feishu_requires(raw: httpx.AsyncClient, lark: FakeLark):
    lark.user_messages["om_user1"] = P2P
    created = await raw.post(
        "/open-apis/im/v1/messages",
        params={"receive_id_type": "chat_id"},
        json={"msg_type": "text", "content": json.dumps({"text": "hi"})},
    )
    assert created.json()["code"] == 99992402, "receive_id is required"
    reaction = await raw.post("/open-apis/im/v1/messages/om_user1/reactions", json={"reaction_type": {}})
    assert reaction.json()["code"] == 99992402, "reaction_type.emoji_type is required"


async def test_the_fake_refuses_card_calls_while_a_press_is_being_answered(raw: httpx.AsyncClient):
    """200810 from the press until its callback is answered — here never, so until the 3 s deadline
    (1 s in this fake) — on a streaming card entity; then the card takes updates again."""
    with FakeLark(ack_deadline=1.0, retry_delays=()) as lark:
        token = await LarkApi(lark.app_id, lark.app_secret, lark.url).tenant_token()
        raw.headers["Authorization"] = f"Bearer {token}"
        raw.base_url = httpx.URL(lark.url)
        card_id = await sent_card(raw, lark, MARKDOWN, GO)
        [message] = lark.chat(P2P)
        async with aiohttp.ClientSession() as session, session.ws_connect(f"{lark.url}/ws?service_id=1"):
            await lark.wait_for(lambda f: f.connected)
            lark.press(message, "Go", ALICE)  # delivered, never answered
            content = f"/open-apis/cardkit/v1/cards/{card_id}/elements/answer/content"
            busy = await raw.put(content, json={"content": "more", "sequence": 1})
            assert busy.json()["code"] == 200810
            settings = await raw.patch(
                f"/open-apis/cardkit/v1/cards/{card_id}/settings",
                json={"settings": json.dumps({"config": {"streaming_mode": False}}), "sequence": 2},
            )
            assert settings.json()["code"] == 200810
            await lark.wait_for(lambda f: not f.cards[card_id].busy, timeout=5)
            later = await raw.put(content, json={"content": "more", "sequence": 3})
            assert later.json()["code"] == 0


@pytest.mark.parametrize("native", [True, False])
async def test_a_reply_paced_faster_than_feishu_allows_stays_inside_the_per_object_rates(
    tmp_path: Path, llm: FakeOpenAI, lark: FakeLark, native: bool
):
    """``edit_interval_seconds: 0`` asks for no pacing at all; Feishu's per-message and per-card rates
    still hold, so nothing is refused and the answer is complete."""
    words = " ".join(f"word{i}" for i in range(300))
    llm.script(Reply(text=words, chunk_size=3, delay=0.005))
    async with running_bot(tmp_path, llm, lark, native_streaming=native, edit_interval_seconds=0) as bot:
        lark.send_message_event(P2P, "p2p", ALICE, "fast please")
        await lark.wait_for_text(P2P, "word299", timeout=60)
        await bot.harness.idle(timeout=30)

    [message] = lark.chat(P2P)
    assert message.text == words and message.buttons == [] and not message.streaming
    assert lark.refusals(230020) == [] and lark.refusals(99991400) == [], "a per-object rate was exceeded"
    assert len(message.history) > 5, "it still streamed"
