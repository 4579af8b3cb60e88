"""Issue 34: named agents bound to places, through the Slack and Telegram fakes and the fake model.

Two Slack channels and a Telegram group are bound to three agents; the fake model records each request,
so the tests read which model name and system prompt every agent's turn carried.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from channels.slack.channel import SlackChannel
from channels.telegram.channel import TelegramChannel
from config.schema import Settings
from tests.agent.helpers import all_tool_results, system_text
from tests.channels.slack.conftest import slack_section
from tests.channels.telegram.conftest import telegram_config
from tests.conftest import fresh_pg_database, make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

pytestmark = pytest.mark.slow  # fake platform and model servers

OPS, DOCS = "C0OPS", "C0DOCS"
GROUP = -100777
ADMIN = 7001


@pytest.fixture
def slack() -> Any:
    with FakeSlack() as server:
        yield server


@pytest.fixture
def tg() -> Any:
    with FakeTelegram(bot_username="switchboard_bot", long_poll_cap=0.5) as server:
        yield server


def model(name: str, llm: FakeOpenAI) -> dict[str, Any]:
    return {
        "name": name,
        "model": f"fake-{name}",
        "api_key": "sk-test-not-a-real-key",
        "base_url": llm.base_url,
    }


def settings_for(
    tmp_path: Path,
    llm: FakeOpenAI,
    slack: FakeSlack,
    bindings: list[dict[str, Any]] | None = None,
    database: str | None = None,
) -> Settings:
    persona = tmp_path / "helper.md"
    persona.write_text("You are Helper, the Telegram group's friendly assistant.\n")
    return make_settings(
        tmp_path,
        llm,
        models=[model("default", llm), model("smart", llm), model("tiny", llm)],
        agents=[
            {"name": "ops", "system_prompt": "You are Ops, the on-call engineer.", "model": "smart"},
            {
                "name": "writer",
                "system_prompt": "You are Writer; you only read and write prose.",
                "model": "tiny",
                "tools": ["ls", "read_file"],
                "switchable": True,
            },
            {"name": "helper", "system_prompt_file": str(persona), "model": "default", "switchable": True},
        ],
        bindings=bindings
        if bindings is not None
        else [
            {"agent": "ops", "provider": "slack", "chat": OPS},
            {"agent": "writer", "provider": "slack", "chat": DOCS},
            {"agent": "helper", "provider": "telegram", "chat": str(GROUP)},
        ],
        channels={"slack": slack_section(slack)},
        **({"database": {"url": database}} if database else {}),
    )


@asynccontextmanager
async def running(settings: Settings, slack: FakeSlack, tg: FakeTelegram) -> AsyncIterator[Harness]:
    slack_channel = SlackChannel(settings.channels.slack, settings=settings)
    tg_channel = TelegramChannel(telegram_config(tg, admins=[str(ADMIN)]), settings=settings)
    channels = {"slack": slack_channel, "telegram": tg_channel}
    async with Harness.running(settings, channels=channels) as harness:  # type: ignore[arg-type]
        await slack.wait_connected()
        yield harness


def says_who(body: dict[str, Any]) -> Reply:
    """The fake model answers with the model it was asked for and its system prompt's first line."""
    first = system_text(body).splitlines()[0]
    return Reply(text=f"[{body['model']}] {first}")


def request_with(llm: FakeOpenAI, needle: str) -> dict[str, Any]:
    return next(b for b in llm.completions if needle in str(b["messages"][-1]))


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


async def test_three_places_three_agents_each_with_its_model_prompt_and_tools(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack, tg: FakeTelegram
) -> None:
    llm.default_reply = says_who
    async with running(settings_for(tmp_path, llm, slack), slack, tg) as h:
        slack.mention(OPS, "U1", "is the site up?")
        ops = await slack.wait_for_text("[fake-smart] You are Ops, the on-call engineer.", OPS)
        tg.user_message(GROUP, "@switchboard_bot hello there", user_id=4242, first_name="Gina")
        helper = await tg.wait_for_bot_text(GROUP, "[fake-default] You are Helper")

        # Writer has no bash: it is not offered, and a call the model makes anyway is refused.
        llm.script(Reply(tool_calls=[ToolCall("bash", {"command": "id"})]), Reply(text="I only write prose."))
        slack.mention(DOCS, "U1", "run id please")
        await slack.wait_for_text("I only write prose.", DOCS)
        await h.idle()

    assert ops.text == "[fake-smart] You are Ops, the on-call engineer."
    assert helper.text == "[fake-default] You are Helper, the Telegram group's friendly assistant."
    writer = request_with(llm, "run id please")
    assert writer["model"] == "fake-tiny"
    assert system_text(writer).startswith("You are Writer; you only read and write prose.")
    assert offered(writer) == ["ls", "read_file"]
    assert "bash" in offered(request_with(llm, "is the site up?"))
    [refusal] = all_tool_results(llm)
    assert refusal.startswith("Refused: `bash` is not available in this conversation: the agent writer")


async def test_agent_names_the_binding_and_an_admin_switches_only_to_switchable_agents(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack, tg: FakeTelegram
) -> None:
    llm.default_reply = says_who
    async with running(settings_for(tmp_path, llm, slack), slack, tg):
        slack.mention(DOCS, "U1", "/agent")
        docs = await slack.wait_for_text("Agent here:", DOCS)
        tg.user_message(GROUP, "/agent@switchboard_bot", user_id=4242)
        group = await tg.wait_for_bot_text(GROUP, "Agent here:")

        tg.user_message(GROUP, "/agent@switchboard_bot writer", user_id=4242)  # not an admin
        await tg.wait_for_bot_text(GROUP, "only an admin")
        tg.user_message(GROUP, "/agent@switchboard_bot ops", user_id=ADMIN)  # ops is not switchable
        refused = await tg.wait_for_bot_text(GROUP, "Can't switch")
        tg.user_message(GROUP, "/agent@switchboard_bot writer", user_id=ADMIN)
        await tg.wait_for_bot_text(GROUP, "now talks to writer")
        # A new reply chain in the group (a new thread) gets the switched agent.
        tg.user_message(GROUP, "@switchboard_bot who are you now?", user_id=4242)
        switched = await tg.wait_for_bot_text(GROUP, "[fake-tiny]")

    assert docs.text.splitlines()[:2] == [
        "Agent here: writer",
        "Why: binding 1 (provider slack, chat C0DOCS).",
    ]
    assert "An admin can switch with /agent NAME: writer, helper." in docs.text
    assert group.text.splitlines()[:2] == [
        "Agent here: helper",
        f"Why: binding 2 (provider telegram, chat {GROUP}).",
    ]
    assert refused.text == "Can't switch to 'ops'. Agents you can switch to: writer, helper."
    assert switched.text == "[fake-tiny] You are Writer; you only read and write prose."


@pytest.fixture(params=["sqlite", "postgres"])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[str | None]:
    """SQLite (cached choices) and PostgreSQL (read by every instance): the same behaviour."""
    if request.param == "sqlite":
        yield None
        return
    async with fresh_pg_database() as url:
        yield url


async def test_a_thread_keeps_its_agent_when_the_binding_changes_new_threads_get_the_new_one(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack, tg: FakeTelegram, database: str | None
) -> None:
    llm.default_reply = says_who
    async with running(settings_for(tmp_path, llm, slack, database=database), slack, tg):
        first = slack.mention(OPS, "U1", "start of an incident")
        await slack.wait_for_text("[fake-smart]", OPS)

    rebound = [{"agent": "writer", "provider": "slack"}]  # now every Slack channel gets writer
    async with running(settings_for(tmp_path, llm, slack, bindings=rebound, database=database), slack, tg):
        thread = first["event"]["ts"]
        slack.mention(OPS, "U1", "/status", thread_ts=thread)
        status = await slack.wait_for(
            lambda: [e for e in slack.ephemerals_for("U1", OPS) if "Agent:" in e.text], what="/status"
        )
        slack.mention(OPS, "U1", "/agent", thread_ts=thread)
        why = await slack.wait_for_text("Agent here:", OPS, thread_ts=thread)
        slack.mention(OPS, "U1", "still on it?", thread_ts=thread)
        await slack.wait_for(
            lambda: len([m for m in slack.channel_messages(OPS, thread) if m.text.startswith("[")]) == 2,
            what="the second answer in the thread",
        )
        slack.mention(OPS, "U1", "a new question")
        new = await slack.wait_for(
            lambda: [
                m for m in slack.channel_messages(OPS) if m.thread_ts != thread and m.text.startswith("[")
            ],
            what="an answer in a new thread",
        )
        answers = [m.text for m in slack.channel_messages(OPS, thread) if m.text.startswith("[")]

    assert "Agent: ops (this thread keeps it; a changed binding" in status[0].text
    assert why.text.splitlines()[:2] == [
        "Agent here: ops",
        "Why: this thread started with it and keeps it; new threads here get writer (binding 0 (provider slack)).",
    ]
    assert answers == ["[fake-smart] You are Ops, the on-call engineer."] * 2
    assert new[0].text == "[fake-tiny] You are Writer; you only read and write prose."


async def test_an_agents_fallback_model_answers_when_its_model_fails(
    tmp_path: Path, llm: FakeOpenAI, slack: FakeSlack, tg: FakeTelegram
) -> None:
    llm.default_reply = says_who
    settings = settings_for(tmp_path, llm, slack)
    settings.models[1].model_extra["max_retries"] = 0  # type: ignore[index]  # "smart" fails at once
    settings.agents[0].fallback_models = ["tiny"]
    llm.script(Reply(status=503, error="overloaded"))
    async with running(settings, slack, tg):
        slack.mention(OPS, "U1", "is the site up?")
        answer = await slack.wait_for_text("[fake-tiny]", OPS)
    assert [body["model"] for body in llm.completions] == ["fake-smart", "fake-tiny"]
    assert answer.text == "[fake-tiny] You are Ops, the on-call engineer."
