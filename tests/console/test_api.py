"""``/api/admin``: the operator console's JSON API on the real app (FastAPI + Service, in-memory chat).

Admins list channels, running turns and dead letters and act on them; everybody else is refused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jwt

from bot.cli import main as switchboard
from bot.inbox import DEAD, DONE
from bot.manager import STOPPED_NOTE
from tests.conftest import make_settings
from tests.connections.conftest import JWT_SECRET, App, auth, jwt_overrides, running_app, token_for
from tests.fakes.openai_server import Reply, ToolCall

ADMIN_ROUTES = [
    "/api/admin/channels",
    "/api/admin/turns",
    "/api/admin/approvals",
    "/api/admin/schedules",
    "/api/admin/dead-letters",
]
#: A command the approval policy calls risky, after one that makes something for it to remove.
RISKY = "rm -rf /mnt/user-data/workspace/build"
RISKY_TURN = (
    Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build && touch build/out"})]),
    Reply(tool_calls=[ToolCall("bash", {"command": RISKY})]),
    Reply(text="done with the build directory"),
)
WAIT_SECONDS = 10.0


def admin_token(user: str = "ops") -> str:
    return jwt.encode({"sub": user, "exp": 2**31 - 1, "admin": True}, JWT_SECRET, algorithm="HS256")


async def get(app: App, path: str, token: str | None) -> Any:
    response = await app.client.get(path, headers=auth(token))
    assert response.status_code == 200, response.text
    return response.json()


async def until(app: App, path: str, token: str | None, check: Any) -> Any:
    """Poll an admin list until ``check`` holds for it (the state changes in the running service)."""
    async with asyncio.timeout(WAIT_SECONDS):
        while True:
            body = await get(app, path, token)
            if check(body):
                return body
            await asyncio.sleep(0.05)


async def test_only_admins_reach_the_console_and_its_api(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        for path in ADMIN_ROUTES:
            assert (await app.client.get(path)).status_code == 401
            refused = await app.client.get(path, headers=auth(token_for("alice")))
            assert refused.status_code == 403, path
            assert "--admin" in refused.json()["detail"]
            assert (await app.client.get(path, headers=auth(admin_token()))).status_code == 200
        for action in (
            "/api/admin/turns/x/stop",
            "/api/admin/dead-letters/x/retry",
            "/api/admin/approvals/X/approve",
            "/api/admin/schedules/x/cancel",
        ):
            assert (await app.client.post(action, headers=auth(token_for("alice")))).status_code == 403
        # A claim of "admin": "yes" is not the JSON true a --admin token carries.
        sloppy = jwt.encode({"sub": "eve", "exp": 2**31 - 1, "admin": "yes"}, JWT_SECRET, algorithm="HS256")
        assert (await app.client.get("/api/admin/turns", headers=auth(sloppy))).status_code == 403

        page = await app.client.get("/admin", headers=auth(token_for("alice")))
        assert page.status_code == 403
        assert (await app.client.get("/admin", headers=auth(admin_token()))).status_code == 200
        # A browser's first load brings no token: the page (no data in it) asks for one.
        first = await app.client.get("/admin")
        assert first.status_code == 200 and 'data-auth-mode="jwt"' in first.text
        assert "script-src 'self'" in first.headers["content-security-policy"]


async def test_with_auth_mode_none_the_local_person_is_the_operator_and_foreign_hosts_are_refused(
    tmp_path, llm
):
    async with running_app(make_settings(tmp_path, llm)) as app:
        channels = await get(app, "/api/admin/channels", None)
        assert [c["name"] for c in channels] == ["telegram"]
        assert channels[0]["state"] == "connected"
        foreign = await app.client.get("/api/admin/turns", headers={"Host": "evil.example"})
        assert foreign.status_code == 400
        assert (await app.client.get("/admin", headers={"Host": "evil.example"})).status_code == 400


async def test_an_admin_sees_a_running_turn_and_stops_it(tmp_path, llm):
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(400)), chunk_size=4, delay=0.05))
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        token = admin_token()
        await app.telegram.say("write me a long story", sender_name="Ada")
        turns = await until(app, "/api/admin/turns", token, lambda b: b and b[0]["state"] == "running")
        assert turns[0]["sender"] == "Ada" and turns[0]["text"] == "write me a long story"
        assert turns[0]["channel"] == "telegram"
        entry_id = turns[0]["id"]

        stopped = await app.client.post(f"/api/admin/turns/{entry_id}/stop", headers=auth(token))
        assert stopped.status_code == 200, stopped.text
        await app.telegram.wait_for_text(STOPPED_NOTE)
        await app.idle()
        assert await get(app, "/api/admin/turns", token) == []
        again = await app.client.post(f"/api/admin/turns/{entry_id}/stop", headers=auth(token))
        assert again.status_code == 409
        unknown = await app.client.post("/api/admin/turns/nope/stop", headers=auth(token))
        assert unknown.status_code == 404


async def test_an_admin_retries_a_dead_letter_and_it_is_answered(tmp_path, llm):
    settings = make_settings(tmp_path, llm, bus={"max_attempts": 1}, **jwt_overrides())
    async with running_app(settings) as app:
        token = admin_token()
        inbox = app.service.inbox
        entry = await inbox.accept(app.telegram.make_message("are you there?", message_id="m-dead"))
        assert await inbox.mark_failed(entry.id, "the model was down") == DEAD

        dead = await get(app, "/api/admin/dead-letters", token)
        assert [(d["id"], d["status"], d["error"]) for d in dead] == [
            (entry.id, "dead", "the model was down")
        ]

        retried = await app.client.post(f"/api/admin/dead-letters/{entry.id}/retry", headers=auth(token))
        assert retried.status_code == 202, retried.text
        await app.telegram.wait_for_text("echo: are you there?")
        await app.idle()
        assert (await inbox.get(entry.id)).status == DONE  # type: ignore[union-attr]
        assert await get(app, "/api/admin/dead-letters", token) == []

        again = await app.client.post(f"/api/admin/dead-letters/{entry.id}/retry", headers=auth(token))
        assert again.status_code == 409
        assert "done" in again.json()["detail"]
        missing = await app.client.post("/api/admin/dead-letters/nope/retry", headers=auth(token))
        assert missing.status_code == 404


def test_token_create_admin_mints_an_operator_token(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(f"auth: {{mode: jwt, jwt_secret: {JWT_SECRET}}}\n")
    assert switchboard(["token", "create", "--config", str(config), "--user", "ops", "--admin"]) == 0
    claims = jwt.decode(capsys.readouterr().out.strip(), JWT_SECRET, algorithms=["HS256"])
    assert claims["sub"] == "ops" and claims["admin"] is True
    assert switchboard(["token", "create", "--config", str(config), "--user", "alice"]) == 0
    assert "admin" not in jwt.decode(capsys.readouterr().out.strip(), JWT_SECRET, algorithms=["HS256"])


async def test_an_admin_approves_a_waiting_command_and_the_chat_says_who(tmp_path, llm):
    llm.script(*RISKY_TURN)
    settings = make_settings(tmp_path, llm, sandbox={"mode": "host"}, **jwt_overrides())
    async with running_app(settings) as app:
        token = admin_token("ops")
        await app.telegram.say("clean up the build", sender_name="Ada")
        await app.telegram.wait_for_text("Approval needed", timeout=30)
        [waiting] = await until(app, "/api/admin/approvals", token, lambda b: len(b) == 1)
        assert waiting["command"] == RISKY and waiting["sender"] == "Ada"
        [workspace] = Path(settings.data_dir).glob("users/*/threads/*/user-data/workspace")
        assert (workspace / "build" / "out").exists()

        refused = await app.client.post(
            f"/api/admin/approvals/{waiting['id']}/approve", headers=auth(token_for("alice"))
        )
        assert refused.status_code == 403
        decided = await app.client.post(f"/api/admin/approvals/{waiting['id']}/approve", headers=auth(token))
        assert decided.status_code == 200, decided.text
        await app.telegram.wait_for_text("done with the build directory", timeout=30)
        await app.telegram.wait_for_text("Approved by ops (console)")
        await app.idle(timeout=20)
        assert not (workspace / "build").exists()
        assert await get(app, "/api/admin/approvals", token) == []
        again = await app.client.post(f"/api/admin/approvals/{waiting['id']}/deny", headers=auth(token))
        assert again.status_code == 404
        wrong = await app.client.post(f"/api/admin/approvals/{waiting['id']}/maybe", headers=auth(token))
        assert wrong.status_code == 422


async def test_an_admin_cancels_somebodys_schedule_and_it_no_longer_shows(tmp_path, llm):
    async with running_app(make_settings(tmp_path, llm, **jwt_overrides())) as app:
        token = admin_token()
        made = await app.say("/schedule every day 09:00 water the plants")
        assert "Scheduled" in made, made
        [schedule] = await get(app, "/api/admin/schedules", token)
        assert schedule["what"] == "water the plants" and schedule["channel"] == "telegram"

        cancelled = await app.client.post(
            f"/api/admin/schedules/{schedule['id']}/cancel", headers=auth(token)
        )
        assert cancelled.status_code == 200, cancelled.text
        assert await get(app, "/api/admin/schedules", token) == []
        listed = await app.say("/schedule list")
        assert "water the plants" not in listed, listed
        again = await app.client.post(f"/api/admin/schedules/{schedule['id']}/cancel", headers=auth(token))
        assert again.status_code == 404
