"""The fake Bot API follows Telegram's getUpdates rules, so tests that rely on it prove something real.

From the Bot API docs: ``offset`` is the first update returned, and an update is confirmed (forgotten
for good) once getUpdates is called with an offset higher than its id; a negative offset keeps only the
last ``-offset``; ``limit`` accepts 1-100; ``timeout`` long-polls; two pollers on one token conflict.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.fakes.telegram import FakeTelegram


async def get_updates(client: httpx.AsyncClient, tg: FakeTelegram, **params: Any) -> Any:
    response = await client.post(f"{tg.url}/bot{tg.token}/getUpdates", data=params)
    return response.status_code, response.json()


def ids(body: dict[str, Any]) -> list[int]:
    return [u["update_id"] for u in body["result"]]


async def test_get_updates_returns_at_most_100_and_forgets_only_what_an_offset_confirmed(tg: FakeTelegram):
    for i in range(150):
        tg.user_message(42, f"m{i}")
    async with httpx.AsyncClient() as client:
        _, first = await get_updates(client, tg, limit=500)
        assert ids(first) == list(range(1, 101)), "limit is capped at 100"
        _, again = await get_updates(client, tg, limit=3)
        assert ids(again) == [1, 2, 3], "nothing is confirmed without an offset"

        _, rest = await get_updates(client, tg, offset=101)
        assert ids(rest) == list(range(101, 151))
        _, after = await get_updates(client, tg, limit=1)
        assert ids(after) == [101], "updates below the offset are gone for good"

        _, last = await get_updates(client, tg, offset=-1)
        assert ids(last) == [150], "a negative offset keeps only the newest"
    assert tg.pending_updates() == [150]


async def test_get_updates_long_polls_and_a_newer_poll_terminates_the_older_with_409():
    with FakeTelegram(long_poll_cap=5.0) as tg:
        await _long_poll_and_conflict(tg)  # type: ignore[arg-type]


async def _long_poll_and_conflict(tg: FakeTelegram) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        older = asyncio.create_task(get_updates(client, tg, timeout=5))
        await asyncio.sleep(0.2)
        assert not older.done(), "an empty queue holds the request (long polling)"
        newer = asyncio.create_task(get_updates(client, tg, timeout=5))
        status, body = await older
        assert status == 409 and "terminated by other getUpdates request" in body["description"]

        tg.user_message(42, "hello")
        status, body = await newer
        assert status == 200 and len(body["result"]) == 1, "a waiting poll returns as soon as news arrives"


async def test_a_chat_nobody_opened_is_chat_not_found_and_a_persons_message_cannot_be_edited(
    tg: FakeTelegram,
):
    person = tg.user_message(42, "hello")
    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        nowhere = (await client.post("/sendMessage", data={"chat_id": 4343, "text": "hi"})).json()
        assert nowhere == {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
        theirs = await client.post(
            "/editMessageText", data={"chat_id": 42, "message_id": person["message_id"], "text": "mine now"}
        )
        assert theirs.json()["description"] == "Bad Request: message can't be edited"
        gone = await client.post("/editMessageText", data={"chat_id": 42, "message_id": 9999, "text": "x"})
        assert gone.json()["description"] == "Bad Request: message to edit not found"


async def test_a_group_takes_20_messages_a_minute_then_429_with_retry_after(tg: FakeTelegram):
    tg.open_chat(-100)
    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        for i in range(20):
            sent = await client.post("/sendMessage", data={"chat_id": -100, "text": f"m{i}"})
            assert sent.json()["ok"] is True
        refused = await client.post("/sendMessage", data={"chat_id": -100, "text": "one too many"})
        body = refused.json()
        assert refused.status_code == 429 and body["error_code"] == 429
        assert 1 <= body["parameters"]["retry_after"] <= 60
        assert body["description"] == f"Too Many Requests: retry after {body['parameters']['retry_after']}"
        tg.open_chat(42)
        private = await client.post(
            "/sendMessage", data={"chat_id": 42, "text": "a private chat is not a group"}
        )
        assert private.json()["ok"] is True
    assert len(tg.bot_messages(-100)) == 20


async def test_replying_to_a_missing_message_needs_allow_sending_without_reply(tg: FakeTelegram):
    tg.open_chat(42)
    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        strict = await client.post(
            "/sendMessage", data={"chat_id": 42, "text": "hi", "reply_parameters": '{"message_id": 777}'}
        )
        assert strict.json()["description"] == "Bad Request: message to be replied not found"
        lenient = await client.post(
            "/sendMessage",
            data={
                "chat_id": 42,
                "text": "hi",
                "reply_parameters": '{"message_id": 777, "allow_sending_without_reply": true}',
            },
        )
        assert lenient.json()["ok"] is True and "reply_to_message" not in lenient.json()["result"]


async def test_text_is_4096_and_a_caption_1024_characters_after_markup(tg: FakeTelegram):
    tg.open_chat(42)
    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        bold = "<b>" + "x" * 4096 + "</b>"  # the tags do not count, the text does
        fits = await client.post("/sendMessage", data={"chat_id": 42, "text": bold, "parse_mode": "HTML"})
        assert fits.json()["ok"] is True
        long = await client.post("/sendMessage", data={"chat_id": 42, "text": "x" * 4097})
        assert long.json()["description"] == "Bad Request: message is too long"
        caption = await client.post(
            "/sendDocument",
            data={"chat_id": 42, "caption": "c" * 1025},
            files={"document": ("a.txt", b"data", "text/plain")},
        )
        assert caption.json()["description"] == "Bad Request: message caption is too long"


def texts(body: dict[str, Any]) -> list[str]:
    return [u["message"].get("text", "") for u in body["result"] if "message" in u]


async def test_with_privacy_mode_on_a_group_delivers_only_what_is_meant_for_the_bot(tg: FakeTelegram):
    """core.telegram.org/bots/features#privacy-mode: commands for the bot, general commands when it
    was the last bot to write, replies to messages meant for it; BotFather adds @mentions. Private chats
    get everything; getMe says the bot cannot read all group messages."""
    group, bot = -100777, f"@{tg.bot_username}"
    tg.user_message(group, "just people talking")
    tg.user_message(group, "/status")  # no bot has written here: not this bot's to take
    tg.user_message(group, f"/status{bot}")
    tg.user_message(group, "/status@some_other_bot")
    mention = tg.user_message(group, f"{bot} what's new?")
    tg.user_message(group, "a reply to the mention", reply_to=mention["message_id"])
    plain = tg.user_message(group, "people again")
    tg.user_message(group, "a reply to people", reply_to=plain["message_id"])
    tg.user_message(42, "a private chat gets everything")
    async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
        me = (await client.post("/getMe")).json()["result"]
        assert me["can_read_all_group_messages"] is False
        _, body = await get_updates(client, tg)
        assert texts(body) == [
            f"/status{bot}",
            f"{bot} what's new?",
            "a reply to the mention",
            "a private chat gets everything",
        ]
        reply = (await client.post("/sendMessage", data={"chat_id": group, "text": "answer"})).json()[
            "result"
        ]
        tg.user_message(group, "/help")  # now the bot was the last bot to write here
        tg.user_message(group, "thanks!", reply_to=reply["message_id"])
        tg.user_message(group, "an other bot speaks", user_id=555, is_bot=True, username="other_bot")
        tg.user_message(group, "/help")  # and now it was not
        _, body = await get_updates(client, tg, offset=ids(body)[-1] + 1)
        assert texts(body) == ["/help", "thanks!"]
    assert [m["text"] for m in tg.withheld] == [
        "just people talking",
        "/status",
        "/status@some_other_bot",
        "people again",
        "a reply to people",
        "an other bot speaks",
        "/help",
    ]


async def test_with_privacy_mode_off_or_as_a_group_admin_the_bot_gets_every_group_message():
    with FakeTelegram(privacy_mode=False) as tg:
        tg.user_message(-100, "just people talking")
        async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
            me = (await client.post("/getMe")).json()["result"]
            _, body = await get_updates(client, tg)
        assert me["can_read_all_group_messages"] is True
        assert texts(body) == ["just people talking"]
    with FakeTelegram() as tg:
        tg.privacy.admin_in.add(-100)
        tg.user_message(-100, "said where the bot is an admin")
        tg.user_message(-200, "said where it is not")
        async with httpx.AsyncClient(base_url=f"{tg.url}/bot{tg.token}") as client:
            _, body = await get_updates(client, tg)
        assert texts(body) == ["said where the bot is an admin"]
