from tests.fakes.openai_server import Reply


async def test_a_direct_message_is_answered_by_the_model_in_one_edited_message(harness, llm):
    llm.script(Reply(text="Hello there, how can I help?", chunk_size=4, delay=0.01))
    answer = await harness.ask("hi")
    assert answer == "Hello there, how can I help?"
    [message] = harness.chat.in_chat("chat-1")
    assert message.history[0] == "…"
    assert message.text == "Hello there, how can I help?"
