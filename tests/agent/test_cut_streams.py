"""A model stream cut half way (no finish reason) is asked for again once, or shown as cut — never as a
complete answer (agent/stream_end.py). The fake model ends the stream cleanly without a finish reason,
as a proxy or an overloaded server that gives up does."""

from __future__ import annotations

from agent.stream_end import CUT_NOTE
from channels.memory import MemoryChannel
from channels.types import ReplyLimits
from tests.conftest import make_settings
from tests.fakes.openai_server import Reply
from tests.harness import Harness

ANSWER = "The capital of Australia is Canberra, chosen as a compromise between Sydney and Melbourne."


def chat() -> MemoryChannel:
    return MemoryChannel("memory", limits=ReplyLimits(text_limit=4000, min_edit_interval=0.01))


def last_assistant_text(request: dict[str, object]) -> str:
    messages = request["messages"]
    assert isinstance(messages, list)
    return next(str(m["content"]) for m in reversed(messages) if m.get("role") == "assistant")


async def test_an_answer_cut_once_is_asked_for_again_and_the_whole_answer_replaces_the_cut_one(tmp_path, llm):
    llm.script(
        Reply(text=ANSWER, chunk_size=8, delay=0.02, cut_after_chunks=4),
        Reply(text=ANSWER, chunk_size=8, delay=0.02),
    )
    channel = chat()
    async with Harness.running(make_settings(tmp_path, llm), channels={"memory": channel}) as h:
        await channel.say("what is the capital of Australia?")
        await h.idle(timeout=30)
    [message] = channel.in_chat("chat-1")
    assert message.text == ANSWER
    assert len(llm.completions) == 2, "the cut answer was asked for once more"
    # The cut attempt's words were taken back while streaming: no version shows them twice.
    assert not any(version.count("The capital") > 1 for version in message.history), message.history


async def test_an_answer_cut_twice_is_kept_and_marked_and_continue_picks_it_up(tmp_path, llm):
    llm.script(
        Reply(text=ANSWER, chunk_size=8, cut_after_chunks=4),
        Reply(text=ANSWER, chunk_size=8, cut_after_chunks=5),
    )
    channel = chat()
    async with Harness.running(make_settings(tmp_path, llm), channels={"memory": channel}) as h:
        await channel.say("what is the capital of Australia?")
        await h.idle(timeout=30)
        [message] = channel.in_chat("chat-1")
        partial = ANSWER[:40]
        assert message.text == f"{partial}\n\n{CUT_NOTE}", "shown as cut, not as a complete answer"
        assert len(llm.completions) == 2, "asked once more, not more"

        await channel.say("continue")
        await h.idle(timeout=30)
    assert last_assistant_text(llm.completions[-1]) == partial, "the model sees where it stopped"
    assert channel.in_chat("chat-1")[-1].text == "echo: continue"


async def test_a_complete_answer_is_asked_for_once_and_not_marked(tmp_path, llm):
    llm.script(Reply(text=ANSWER, chunk_size=8))
    channel = chat()
    async with Harness.running(make_settings(tmp_path, llm), channels={"memory": channel}) as h:
        await channel.say("what is the capital of Australia?")
        await h.idle(timeout=30)
    assert [m.text for m in channel.in_chat("chat-1")] == [ANSWER]
    assert len(llm.completions) == 1
