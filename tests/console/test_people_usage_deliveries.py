"""The console's GitHub deliveries (retry), token usage and people (unlink), on the real app with the
fake GitHub API and the fake model; each action changes what the person concerned sees."""

from __future__ import annotations

import pytest

from tests.connections.conftest import auth, token_for
from tests.console.kit import admin_token, console_settings, running_console
from tests.fakes.openai_server import Reply
from tests.github.conftest import BOT, REPO, app_key, comment_payload, github  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow  # the fake GitHub and model servers, the service's lifespan


async def test_an_admin_retries_a_failed_github_delivery_and_the_comment_is_posted(
    tmp_path,
    llm,
    github,  # noqa: F811
):
    settings = console_settings(tmp_path, llm, github, queue_size=1)
    github.pause("create_comment")  # the first turn holds the only slot, so the second delivery fails
    async with running_console(settings) as console:
        await console.deliver("issue_comment", comment_payload(f"@{BOT} first", number=1), "ok-1")
        failed = await console.deliver("issue_comment", comment_payload(f"@{BOT} second", number=2), "fail-1")
        assert failed.status_code == 503
        listed = {d["id"]: d for d in await console.get("/api/admin/deliveries")}
        assert listed["fail-1"]["status"] == "failed" and listed["fail-1"]["retryable"] is True
        assert listed["fail-1"]["event"] == "issue_comment.created"
        assert listed["ok-1"]["retryable"] is False
        github.resume("create_comment")
        await console.idle()
        assert github.comments_on(REPO, 2) == []

        retried = await console.client.post("/api/admin/deliveries/fail-1/retry", headers=auth(admin_token()))
        assert retried.status_code == 202, retried.text
        [answer] = await github.wait_for(lambda: github.comments_on(REPO, 2) or None)
        await github.wait_for(lambda: answer.body.startswith("echo:"))
        await console.idle()
        done = {d["id"]: d for d in await console.get("/api/admin/deliveries")}["fail-1"]
        assert done["status"] == "done" and done["detail"] == "fired: reviewer"

        again = await console.client.post("/api/admin/deliveries/fail-1/retry", headers=auth(admin_token()))
        assert again.status_code == 409 and "only failed or stuck" in again.json()["detail"]
        unknown = await console.client.post("/api/admin/deliveries/nope/retry", headers=auth(admin_token()))
        assert unknown.status_code == 404
    assert len(github.comments_on(REPO, 1)) == 1


async def test_an_admin_unlinks_a_persons_connection_and_it_is_gone_for_them(
    tmp_path,
    llm,
    github,  # noqa: F811
):
    async with running_console(console_settings(tmp_path, llm, github)) as console:
        alice = token_for("alice")
        code = await console.client.post("/api/channels/telegram/connect", headers=auth(alice))
        await console.telegram.say(f"/start {code.json()['code']}", sender="tg-alice", sender_name="Alice")
        await console.idle()
        [person] = [p for p in await console.get("/api/admin/people") if p["id"] == "alice"]
        [connection] = person["connections"]
        assert connection["provider"] == "telegram" and connection["external_id"] == "tg-alice"

        path = f"/api/admin/people/alice/connections/{connection['id']}/unlink"
        unlinked = await console.client.post(path, headers=auth(admin_token()))
        assert unlinked.status_code == 200, unlinked.text
        assert "alice's telegram account" in unlinked.json()["result"]
        mine = await console.client.get("/api/channels/connections", headers=auth(alice))
        assert mine.json() == []
        [person] = [p for p in await console.get("/api/admin/people") if p["id"] == "alice"]
        assert person["connections"] == []
        again = await console.client.post(path, headers=auth(admin_token()))
        assert again.status_code == 404
        wrong_owner = f"/api/admin/people/bob/connections/{connection['id']}/unlink"
        assert (await console.client.post(wrong_owner, headers=auth(admin_token()))).status_code == 404


async def test_usage_shows_each_persons_tokens_as_the_model_reported_them(
    tmp_path,
    llm,
    github,  # noqa: F811
):
    llm.script(
        Reply(text="first answer", prompt_tokens=120, completion_tokens=30),
        Reply(text="second answer", prompt_tokens=200, completion_tokens=45),
    )
    settings = console_settings(tmp_path, llm, github)
    for model in settings.models:  # $2.50 in / $10.00 out per million tokens (docs/budgets.md)
        model.pricing = {"input": "2.50", "output": "10.00", "currency": "USD"}  # type: ignore[assignment]
    async with running_console(settings) as console:
        alice = token_for("alice")
        code = await console.client.post("/api/channels/telegram/connect", headers=auth(alice))
        await console.telegram.say(f"/start {code.json()['code']}", sender="tg-alice")
        await console.idle()
        assert await console.get("/api/admin/usage") == []
        await console.telegram.say("hello", sender="tg-alice")
        await console.telegram.wait_for_text("first answer")
        await console.telegram.say("and again", sender="tg-alice")
        await console.telegram.wait_for_text("second answer")
        await console.idle()
        [usage] = await console.get("/api/admin/usage")
    assert usage["owner"] == "alice"
    assert (usage["input_tokens"], usage["output_tokens"]) == (320, 75)
    assert (usage["turns"], usage["threads"], usage["models"]) == (
        2,
        1,
        ["default"],
    )  # the configured model's name
    # 320 × 2.50 + 75 × 10.00 millionths of a dollar: 800 + 750 = 1,550 → $0.00155, all of it today.
    assert (usage["cost_today"], usage["cost_month"], usage["currency"]) == ("0.00155", "0.00155", "USD")
