"""Issue 10: a brake on guessing /connect codes — per sender and per chat, reset by a success."""

from __future__ import annotations

import asyncio

from tests.conftest import make_settings
from tests.connections.conftest import running_app

WRONG = "/connect not-the-right-code-{n}"
THROTTLED = "Too many wrong connection codes from here."


async def test_after_five_wrong_codes_even_a_right_one_is_refused_and_nothing_binds(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        code = (await app.new_code())["code"]
        wrong = [await app.say(WRONG.format(n=n), sender="mallory") for n in range(5)]
        refused = await app.say(f"/connect {code}", sender="mallory")
        # Someone else, in their own chat, is not affected.
        other = await app.say(f"/connect {code}", sender="alice", chat="chat-alice")
        connections = await app.connections()
    assert wrong == ["That connection code is invalid or expired."] * 5
    assert refused.startswith(THROTTLED) and "Wait about 10 minutes" in refused
    assert other == "Connected: this Telegram account now belongs to default."
    assert [c["external_id"] for c in connections] == ["alice"]


async def test_guesses_from_many_senders_in_one_group_chat_share_the_chats_brake(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        for n in range(5):
            await app.say(WRONG.format(n=n), sender=f"sock-{n}", chat="group-1", private=False)
        sixth = await app.say(WRONG.format(n=6), sender="sock-6", chat="group-1", private=False)
        elsewhere = await app.say(WRONG.format(n=7), sender="sock-6", chat="chat-private")
    assert sixth.startswith(THROTTLED)
    assert elsewhere == "That connection code is invalid or expired."


async def test_a_successful_connect_clears_the_count(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        code = (await app.new_code())["code"]
        for n in range(4):
            await app.say(WRONG.format(n=n), sender="typo")
        assert (await app.say(f"/connect {code}", sender="typo")).startswith("Connected")
        after = [await app.say(WRONG.format(n=n), sender="typo") for n in range(4, 8)]
    assert after == ["That connection code is invalid or expired."] * 4


async def test_the_brake_lifts_when_the_window_has_passed(tmp_path, llm):
    settings = make_settings(
        tmp_path, llm, connections={"max_failed_attempts": 2, "failed_attempts_window_seconds": 1}
    )
    async with running_app(settings) as app:
        code = (await app.new_code())["code"]
        await app.say(WRONG.format(n=1), sender="slow")
        await app.say(WRONG.format(n=2), sender="slow")
        assert (await app.say(f"/connect {code}", sender="slow")).startswith(THROTTLED)
        await asyncio.sleep(1.2)  # let the one-second window lapse (not an assertion on speed)
        assert (await app.say(f"/connect {code}", sender="slow")).startswith("Connected")
