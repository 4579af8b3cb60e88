"""SCENARIOS 17–19, 22–23: the command router and its commands, through the chat."""

from __future__ import annotations

from tests.fakes.openai_server import Reply, last_user_text


async def test_new_starts_a_fresh_thread_without_the_old_turns(harness, llm):
    await harness.ask("my name is Bob")
    assert await harness.ask("what is my name?") == "echo: what is my name?"
    assert any("my name is Bob" in str(m) for m in llm.completions[-1]["messages"])
    answer = await harness.ask("/new")
    assert answer.startswith("Started a new conversation")
    await harness.ask("who am I?")
    assert not any("Bob" in str(m) for m in llm.completions[-1]["messages"])


async def test_status_shows_thread_model_and_run_state(harness, llm):
    status = await harness.ask("/status")
    conv = await harness.service.threads.get(("memory", "", "chat-1", ""))
    assert conv is not None
    assert f"Thread: {conv.thread_id}" in status
    assert "Model: default" in status
    assert "State: idle" in status
    llm.script(Reply(text="busy busy busy busy", chunk_size=1, delay=0.1))
    await harness.chat.say("work")
    await harness.chat.wait_for(lambda ch: any(m.text.startswith("busy") for m in ch.messages.values()))
    await harness.chat.say("more work")
    await harness.chat.wait_for_text("Queued")
    await harness.chat.say("/status")
    running = await harness.chat.wait_for_text("State: running, 1 queued")
    assert "Model: default" in running.text
    await harness.idle(timeout=20)


async def test_models_lists_switches_and_rejects_unknown_names(harness, llm):
    listing = await harness.ask("/models")
    assert "default (current)" in listing and "smart" in listing
    assert await harness.ask("/models smart") == "This conversation now uses smart."
    await harness.ask("which model?")
    assert llm.completions[-1]["model"] == "fake-smart"
    assert "(current)" in (await harness.ask("/models")).split("smart")[1]
    answer = await harness.ask("/models gpt-17")
    assert answer == "Unknown model 'gpt-17'. Available: default, smart."
    await harness.ask("still smart?")
    assert llm.completions[-1]["model"] == "fake-smart"


async def test_help_lists_every_command(harness):
    text = await harness.ask("/help")
    for name in ("/help", "/models", "/new", "/status", "/stop"):
        assert name in text


async def test_mention_prefixed_and_bot_suffixed_commands_are_commands(harness, llm):
    assert (await harness.ask("@switchboard /help")).startswith("Commands:")
    assert (await harness.ask("/help@switchboard_bot")).startswith("Commands:")
    assert (await harness.ask("<@U123> /status")).startswith("Thread:")
    assert llm.completions == []


async def test_a_slash_mid_sentence_is_chat_and_an_unknown_command_is_explained(harness, llm):
    assert await harness.ask("please read /etc/hosts for me") == "echo: please read /etc/hosts for me"
    assert (
        await harness.ask("/frobnicate now")
        == "Unknown command /frobnicate. Send /help to see what I understand."
    )
    assert [last_user_text(b) for b in llm.completions] == ["please read /etc/hosts for me"]
