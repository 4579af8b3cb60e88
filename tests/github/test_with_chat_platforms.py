"""GitHub enabled next to a chat platform: the GitHub feature must not take anything away from the chat.

Regression: the GitHub feature used to wrap the identity resolver, and ``/connect`` checked the
resolver's class, so with GitHub enabled every chat platform answered "Connecting accounts is not
available on this server".
"""

from __future__ import annotations

from channels.memory import MemoryChannel
from tests.connections.conftest import running_app
from tests.fakes.github import FakeGitHub
from tests.fakes.openai_server import FakeOpenAI
from tests.github.conftest import github_settings
from webhooks.channel import GitHubChannel


async def test_connect_works_in_a_chat_when_github_is_enabled(tmp_path, llm: FakeOpenAI, github: FakeGitHub):
    settings = github_settings(tmp_path, llm, github)
    telegram = MemoryChannel("telegram")
    channels = {"telegram": telegram, "github": GitHubChannel(settings.channels.github, settings=settings)}
    async with running_app(settings, channels) as app:  # type: ignore[arg-type]
        code = (await app.new_code())["code"]
        reply = await app.say(f"/connect {code}", sender="4242", sender_name="Alice Example")
        connections = await app.connections()

    assert reply == "Connected: this Telegram account now belongs to default."
    assert [(c["provider"], c["external_id"]) for c in connections] == [("telegram", "4242")]


async def test_a_chat_sender_keeps_their_connected_owner_when_github_is_enabled(
    tmp_path, llm: FakeOpenAI, github: FakeGitHub
):
    """The identity chain still reaches the connections resolver for non-GitHub messages."""
    settings = github_settings(tmp_path, llm, github)
    settings.connections.require_bound_identity = True
    telegram = MemoryChannel("telegram")
    channels = {"telegram": telegram, "github": GitHubChannel(settings.channels.github, settings=settings)}
    async with running_app(settings, channels) as app:  # type: ignore[arg-type]
        refused = await app.say("hello", sender="4242")
        code = (await app.new_code())["code"]
        await app.say(f"/connect {code}", sender="4242")
        answered = await app.say("hello again", sender="4242")

    assert "only answers people who have connected" in refused
    assert answered == "echo: hello again"
