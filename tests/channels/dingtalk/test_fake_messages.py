"""The fake's session webhook follows DingTalk's robot rules (each test failed against the old fake,
which took any number of messages and a markdown message without a title)."""

from __future__ import annotations

import httpx

from tests.fakes.dingtalk import FakeDingTalk


def _webhook(fake: FakeDingTalk) -> str:
    return str(
        fake.build_message("2", "hi", sender_id="bob", conversation_id="cid-team", at_bot=True)[
            "sessionWebhook"
        ]
    )


async def test_the_21st_message_in_a_minute_is_send_too_fast_and_not_shown(fake_dingtalk):
    webhook = _webhook(fake_dingtalk)
    async with httpx.AsyncClient() as client:
        answers = [
            (await client.post(webhook, json={"msgtype": "text", "text": {"content": f"m{i}"}})).json()
            for i in range(21)
        ]
    assert [a["errcode"] for a in answers] == [0] * 20 + [130101]
    assert len(fake_dingtalk.bubbles("cid-team")) == 20


async def test_a_markdown_message_needs_a_title_and_a_text(fake_dingtalk):
    webhook = _webhook(fake_dingtalk)
    async with httpx.AsyncClient() as client:
        untitled = await client.post(webhook, json={"msgtype": "markdown", "markdown": {"text": "**hi**"}})
        empty = await client.post(webhook, json={"msgtype": "markdown", "markdown": {"title": "hi"}})
        whole = await client.post(
            webhook, json={"msgtype": "markdown", "markdown": {"title": "hi", "text": "**hi**"}}
        )
    assert [a.json()["errcode"] for a in (untitled, empty, whole)] == [40035, 40035, 0]
    assert [b.text for b in fake_dingtalk.bubbles("cid-team")] == ["**hi**"]
