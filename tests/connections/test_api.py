"""SCENARIOS 24, 28, 30, 33 and the provider list, through HTTP against the real app."""

from __future__ import annotations

import base64
import re
import sqlite3
from pathlib import Path

from channels.memory import MemoryChannel
from tests.conftest import make_settings
from tests.connections.conftest import auth, jwt_overrides, running_app, token_for


def _settings(tmp_path: Path, llm, **overrides):  # type: ignore[no-untyped-def]
    overrides.setdefault("channels", {"telegram": {"bot_username": "switchboard_bot"}})
    return make_settings(tmp_path, llm, **overrides)


async def test_a_telegram_code_is_one_time_random_with_a_deep_link_instruction_and_expiry(tmp_path, llm):
    async with running_app(_settings(tmp_path, llm)) as app:
        body = await app.new_code("telegram")

    code = body["code"]
    assert body["provider"] == "telegram"
    assert re.fullmatch(r"[A-Za-z0-9_-]+", code)
    assert len(base64.urlsafe_b64decode(code + "=" * (-len(code) % 4))) * 8 >= 128
    assert body["url"] == f"https://t.me/switchboard_bot?start={code}"
    assert f"/start {code}" in body["instruction"]
    assert 590 <= body["expires_in"] <= 600


async def test_the_code_itself_is_never_stored_only_its_hash(tmp_path, llm):
    settings = _settings(tmp_path, llm)
    async with running_app(settings) as app:
        code = (await app.new_code("telegram"))["code"]
    database = Path(settings.database.url.split("///", 1)[1])
    with sqlite3.connect(database) as db:
        dump = "\n".join(db.iterdump())
    assert code not in dump
    assert "connect_codes" in dump


async def test_two_codes_are_different(tmp_path, llm):
    async with running_app(_settings(tmp_path, llm)) as app:
        first, second = await app.new_code(), await app.new_code()
    assert first["code"] != second["code"]


async def test_other_providers_get_the_connect_instruction_and_no_link(tmp_path, llm):
    channels = {"telegram": MemoryChannel("telegram"), "slack": MemoryChannel("slack")}
    async with running_app(_settings(tmp_path, llm), channels) as app:
        body = await app.new_code("slack")
    assert body["url"] is None
    # Slack keeps "/…" in a message box for its own slash commands: the app's one command carries it.
    assert f"/switchboard connect {body['code']}" in body["instruction"]
    assert "Slack" in body["instruction"]


async def test_feishu_and_dingtalk_codes_are_sent_as_typed_connect_commands(tmp_path, llm):
    channels = {name: MemoryChannel(name) for name in ("telegram", "feishu", "dingtalk")}
    async with running_app(_settings(tmp_path, llm), channels) as app:
        feishu, dingtalk = await app.new_code("feishu"), await app.new_code("dingtalk")
    assert f"Send /connect {feishu['code']} to the bot in Feishu" in feishu["instruction"]
    assert f"Send /connect {dingtalk['code']} to the bot in DingTalk" in dingtalk["instruction"]


async def test_the_telegram_deep_link_uses_the_name_the_running_channel_learnt(tmp_path, llm):
    channels = {"telegram": MemoryChannel("telegram", handle="learnt_bot")}
    async with running_app(make_settings(tmp_path, llm), channels) as app:
        body = await app.new_code("telegram")
    assert body["url"] == f"https://t.me/learnt_bot?start={body['code']}"
    assert f"/start {body['code']} to @learnt_bot" in body["instruction"]


async def test_telegram_without_a_bot_username_has_no_deep_link(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm)) as app:
        body = await app.new_code("telegram")
    assert body["url"] is None
    assert f"/start {body['code']}" in body["instruction"]


async def test_the_providers_list_shows_what_can_be_connected_and_what_is_connected(tmp_path, llm):
    async with running_app(_settings(tmp_path, llm)) as app:
        before = {p["name"]: p for p in (await app.client.get("/api/channels/providers")).json()}
        code = (await app.new_code())["code"]
        await app.say(f"/start {code}")
        after = {p["name"]: p for p in (await app.client.get("/api/channels/providers")).json()}

    assert set(before) >= {"telegram", "slack", "discord", "feishu", "dingtalk", "github"}
    assert before["telegram"]["enabled"] and before["telegram"]["connectable"]
    assert not before["telegram"]["connected"]
    assert not before["slack"]["enabled"]
    assert "channels.slack.enabled" in before["slack"]["reason"]
    assert not before["github"]["connectable"]
    assert after["telegram"]["connected"] and after["telegram"]["connections"] == 1


async def test_more_than_five_pending_codes_per_provider_is_429(tmp_path, llm):
    channels = {"telegram": MemoryChannel("telegram"), "slack": MemoryChannel("slack")}
    async with running_app(_settings(tmp_path, llm), channels) as app:
        for _ in range(5):
            await app.new_code("telegram")
        refused = await app.client.post("/api/channels/telegram/connect")
        other_provider = await app.client.post("/api/channels/slack/connect")

    assert refused.status_code == 429
    assert "5" in refused.json()["detail"]
    assert other_provider.status_code == 200


async def test_a_used_code_frees_a_pending_slot(tmp_path, llm):
    async with running_app(_settings(tmp_path, llm)) as app:
        codes = [(await app.new_code())["code"] for _ in range(5)]
        await app.say(f"/start {codes[0]}")
        again = await app.client.post("/api/channels/telegram/connect")
    assert again.status_code == 200


async def test_an_unknown_provider_is_404_not_500(tmp_path, llm):
    async with running_app(_settings(tmp_path, llm)) as app:
        post = await app.client.post("/api/channels/myspace/connect")
        odd = await app.client.post("/api/channels/%20..%2F/connect")
    assert post.status_code == 404
    assert "myspace" in post.json()["detail"]
    assert odd.status_code == 404


async def test_a_disabled_provider_is_400_with_the_reason(tmp_path, llm):
    async with running_app(_settings(tmp_path, llm)) as app:
        slack = await app.client.post("/api/channels/slack/connect")
        github = await app.client.post("/api/channels/github/connect")
    assert slack.status_code == 400
    assert "not enabled" in slack.json()["detail"]
    assert github.status_code == 400
    assert "GitHub" in github.json()["detail"]


async def test_deleting_ones_own_connection_is_204_and_unbinds_the_identity(tmp_path, llm):
    settings = _settings(tmp_path, llm, connections={"require_bound_identity": True})
    async with running_app(settings) as app:
        await app.say(f"/start {(await app.new_code())['code']}")
        [connection] = await app.connections()
        deleted = await app.client.delete(f"/api/channels/connections/{connection['id']}")
        after = await app.connections()
        reply = await app.say("are you still there?")
        again = await app.client.delete(f"/api/channels/connections/{connection['id']}")

    assert deleted.status_code == 204
    assert deleted.content == b""
    assert after == []
    assert "/connect CODE" in reply  # unbound again: the gate explains how to connect
    assert again.status_code == 404


async def test_deleting_someone_elses_connection_is_404_and_changes_nothing(tmp_path, llm):
    alice, bob = token_for("alice"), token_for("bob")
    async with running_app(_settings(tmp_path, llm, **jwt_overrides())) as app:
        await app.say(f"/start {(await app.new_code(token=alice))['code']}")
        [connection] = await app.connections(alice)
        as_bob = await app.client.delete(f"/api/channels/connections/{connection['id']}", headers=auth(bob))
        unknown = await app.client.delete("/api/channels/connections/nope", headers=auth(alice))
        bobs_view = await app.connections(bob)
        alices_view = await app.connections(alice)

    assert as_bob.status_code == 404
    assert unknown.status_code == 404
    assert bobs_view == []
    assert [c["id"] for c in alices_view] == [connection["id"]]


async def test_openapi_describes_the_connections_contract(tmp_path, llm):
    async with running_app(_settings(tmp_path, llm)) as app:
        spec = (await app.client.get("/openapi.json")).json()

    paths = spec["paths"]
    create = paths["/api/channels/{provider}/connect"]["post"]
    schema_ref = create["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    fields = spec["components"]["schemas"][schema_ref.rsplit("/", 1)[1]]["properties"]
    assert set(fields) >= {"provider", "code", "url", "instruction", "expires_in"}
    assert {"400", "404", "429"} <= set(create["responses"])
    assert "204" in paths["/api/channels/connections/{connection_id}"]["delete"]["responses"]
    assert "get" in paths["/api/channels/providers"]
    assert "get" in paths["/api/channels/connections"]


async def test_the_connect_page_and_its_assets_are_served(tmp_path, llm):
    async with running_app(_settings(tmp_path, llm)) as app:
        page = await app.client.get("/connect")
        script = await app.client.get("/connect/assets/connect.js")
        style = await app.client.get("/connect/assets/connect.css")
        missing = await app.client.get("/connect/assets/secrets.txt")

    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'data-auth-mode="none"' in page.text
    assert "Connect your chat accounts" in page.text
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert style.status_code == 200 and "text/css" in style.headers["content-type"]
    assert missing.status_code == 404
