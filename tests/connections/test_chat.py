"""SCENARIOS 25, 26, 31, 32 in chat: a fake Telegram sends /start CODE and /connect CODE to the real service."""

from __future__ import annotations

import asyncio
from pathlib import Path

from channels.memory import MemoryChannel
from tests.conftest import make_settings
from tests.connections.conftest import jwt_overrides, running_app, token_for
from tests.fakes.openai_server import Reply


async def test_start_code_binds_a_sender_who_is_not_on_the_allow_list(tmp_path, llm):
    telegram = MemoryChannel("telegram", allowed_users=["somebody-else"])
    async with running_app(make_settings(tmp_path, llm), {"telegram": telegram}) as app:
        code = (await app.new_code())["code"]
        reply = await app.say(f"/start {code}", sender="4242", sender_name="Alice Example")
        connections = await app.connections()

    assert reply == "Connected: this Telegram account now belongs to default."
    [connection] = connections
    assert connection["provider"] == "telegram"
    assert connection["external_id"] == "4242"
    assert connection["external_name"] == "Alice Example"
    assert connection["status"] == "active"


async def test_connect_code_works_as_well_as_start(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        code = (await app.new_code(token=token_for("alice")))["code"]
        reply = await app.say(f"/connect@switchboard_bot {code}")
    assert reply == "Connected: this Telegram account now belongs to alice."


async def test_a_used_code_is_rejected_and_changes_nothing(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        code = (await app.new_code())["code"]
        await app.say(f"/start {code}", sender="first")
        reply = await app.say(f"/start {code}", sender="second", chat="chat-2")
        connections = await app.connections()

    assert "already been used" in reply
    assert [c["external_id"] for c in connections] == ["first"]


async def test_an_unknown_code_is_rejected(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        reply = await app.say("/connect not-a-real-code-at-all")
        connections = await app.connections()
    assert reply == "That connection code is invalid or expired."
    assert connections == []


async def test_an_expired_code_is_rejected(tmp_path, llm):
    settings = make_settings(tmp_path, llm, connections={"code_ttl_seconds": 1})
    async with running_app(settings) as app:
        body = await app.new_code()
        await asyncio.sleep(1.2)  # let the one-second code lapse (not an assertion on speed)
        reply = await app.say(f"/start {body['code']}")
        connections = await app.connections()
    assert "expired" in reply
    assert connections == []


async def test_a_code_made_for_another_platform_is_rejected_and_stays_usable_there(tmp_path, llm):
    channels = {"telegram": MemoryChannel("telegram"), "slack": MemoryChannel("slack")}
    async with running_app(make_settings(tmp_path, llm), channels) as app:
        code = (await app.new_code("slack"))["code"]
        wrong = await app.say(f"/start {code}")
        nothing = await app.connections()
        right = await app.say(f"/connect {code}", channel="slack", workspace="T1")
        connections = await app.connections()

    assert "made for Slack, not Telegram" in wrong
    assert nothing == []
    assert right == "Connected: this Slack account now belongs to default."
    assert [(c["provider"], c["workspace"]) for c in connections] == [("slack", "T1")]


async def test_connect_without_a_code_explains_where_to_get_one(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        reply = await app.say("/start")
    assert "/connect" in reply
    assert "http://localhost:8001/connect" in reply


async def test_require_bound_identity_tells_an_unbound_sender_how_to_connect_and_runs_nothing(tmp_path, llm):
    settings = make_settings(tmp_path, llm, connections={"require_bound_identity": True})
    async with running_app(settings) as app:
        message = app.telegram.make_message("please delete the prod database")
        before = set(app.telegram.messages)
        await app.telegram.deliver(message)
        await app.idle()
        hint = [m.text for ref, m in app.telegram.messages.items() if ref not in before]
        thread = await app.service.threads.get(message.conversation_key)

        await app.say(f"/start {(await app.new_code())['code']}")
        llm.script(Reply(text="Hi, connected person."))
        answer = await app.say("hello again")

    assert len(hint) == 1 and "/connect CODE" in hint[0]
    assert thread is None
    assert "prod database" not in str(llm.completions)  # the gated message never reached the model
    assert answer == "Hi, connected person."


async def test_a_bound_senders_files_live_under_their_owner_and_not_another_owners(tmp_path, llm):
    settings = make_settings(tmp_path, llm, **jwt_overrides())
    async with running_app(settings) as app:
        await app.say(f"/start {(await app.new_code(token=token_for('alice')))['code']}", sender="a1")
        await app.say(
            f"/start {(await app.new_code(token=token_for('bob')))['code']}", sender="b1", chat="chat-b"
        )
        await app.say("here is my report", sender="a1", files=[("report.txt", b"alice's numbers")])
        await app.say("mine too", sender="b1", chat="chat-b", files=[("report.txt", b"bob's numbers")])
        await app.say("and me", sender="stranger", chat="chat-s", files=[("report.txt", b"unbound")])

    users = Path(settings.data_dir) / "users"
    alice_files = list((users / "alice").glob("threads/*/user-data/uploads/report.txt"))
    bob_files = list((users / "bob").glob("threads/*/user-data/uploads/report.txt"))
    stranger_files = list((users / "telegram_-_stranger").glob("threads/*/user-data/uploads/report.txt"))
    assert [p.read_bytes() for p in alice_files] == [b"alice's numbers"]
    assert [p.read_bytes() for p in bob_files] == [b"bob's numbers"]
    assert [p.read_bytes() for p in stranger_files] == [b"unbound"]
    assert alice_files[0].parts[-4] != bob_files[0].parts[-4]  # different threads too


async def test_a_second_owner_binding_the_same_account_revokes_the_first(tmp_path, llm):
    alice, bob = token_for("alice"), token_for("bob")
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        await app.say(f"/start {(await app.new_code(token=alice))['code']}", sender="shared")
        reply = await app.say(f"/start {(await app.new_code(token=bob))['code']}", sender="shared")
        alices, bobs = await app.connections(alice), await app.connections(bob)

    assert reply == "Connected: this Telegram account now belongs to bob."
    assert alices == []
    assert [c["external_id"] for c in bobs] == ["shared"]


async def test_connecting_again_with_ones_own_code_says_it_is_already_connected(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        await app.say(f"/start {(await app.new_code())['code']}")
        reply = await app.say(f"/start {(await app.new_code())['code']}")
        connections = await app.connections()
    assert reply == "This Telegram account is already connected to default."
    assert len(connections) == 1


async def test_two_senders_racing_for_one_code_in_chat_exactly_one_wins(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        code = (await app.new_code())["code"]
        await asyncio.gather(
            *(app.telegram.say(f"/start {code}", sender=f"s{i}", chat=f"c{i}") for i in range(4))
        )
        await app.idle()
        replies = [m.text for m in app.telegram.messages.values()]
        connections = await app.connections()

    assert sum(r.startswith("Connected:") for r in replies) == 1
    assert sum("already been used" in r for r in replies) == 3
    assert len(connections) == 1


def _chat_requests_containing(llm, needle: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [body for body in llm.completions if needle in str(body["messages"])]


async def test_a_private_chat_follows_its_owner_across_connect_and_disconnect(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        alice = token_for("alice")
        await app.say("secret before connecting: plum")
        await app.say(f"/start {(await app.new_code(token=alice))['code']}")
        await app.say("alice's secret: walnut")
        await app.say("what did I say?")
        connected_view = _chat_requests_containing(llm, "what did I say?")[-1]

        [connection] = await app.connections(alice)
        await app.client.delete(
            f"/api/channels/connections/{connection['id']}", headers={"Authorization": f"Bearer {alice}"}
        )
        await app.say("and now, what do you remember?")
        disconnected_view = _chat_requests_containing(llm, "and now, what do you remember?")[-1]

    # Connected: alice's thread has her own words but not what the unconnected account said before.
    assert "walnut" in str(connected_view["messages"])
    assert "plum" not in str(connected_view["messages"])
    # Disconnected: the account no longer continues (or reads back) alice's conversation.
    assert "walnut" not in str(disconnected_view["messages"])
