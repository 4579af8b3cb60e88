"""The Stop button on a streaming reply (the neutral contract, on the in-memory platform).

What a person in the chat notices: while an answer streams it carries a Stop button; pressing it stops
that answer ("⏹ Stopped.") and the button is gone with the final text; somebody else's press is
refused politely and the answer goes on; an admin may press anybody's; a press delivered twice acts
once; a late press of a finished answer's button stops nothing (not even the next answer).
Each platform's own widget is tested against its fake under tests/channels/.
"""

from __future__ import annotations

from channels.memory import MemoryChannel, VisibleMessage
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Hold, Reply
from tests.harness import Harness

STOP = "⏹ Stop"
GROUP = {"chat": "team", "private": False, "mentioned": True}


def slow_answer(llm: FakeOpenAI, words: int = 200, word: str = "word") -> None:
    llm.script(Reply(text=" ".join(f"{word}{i}" for i in range(words)), chunk_size=8, delay=0.05))


async def live_reply(h: Harness, chat: str = "chat-1") -> VisibleMessage:
    """The streaming answer, once it shows text and its Stop button."""
    await h.chat.wait_for(
        lambda ch: any("word3" in m.text and m.actions for m in ch.in_chat(chat)), timeout=20
    )
    return next(m for m in h.chat.in_chat(chat) if "word3" in m.text)


async def test_pressing_stop_stops_the_answer_and_the_button_goes_away(tmp_path, llm):
    async with Harness.running(make_settings(tmp_path, llm)) as h:
        slow_answer(llm)
        await h.chat.say("tell me a long story")
        reply = await live_reply(h)
        assert [a.label for a in reply.actions] == [STOP]
        await h.chat.press(reply.ref, STOP)
        await h.idle(timeout=20)
        assert reply.text.endswith("⏹ Stopped.")
        assert "word199" not in reply.text
        assert reply.actions == (), "the Stop button outlived its answer"
        # The next question is answered normally, with its own button while it streams.
        llm.script(Reply(text="short one"))
        assert "short one" in await h.ask("and now?")


async def test_somebody_elses_press_is_refused_and_the_answer_goes_on(tmp_path, llm):
    async with Harness.running(make_settings(tmp_path, llm)) as h:
        slow_answer(llm, words=60)
        await h.chat.say("a long story please", **GROUP)
        reply = await live_reply(h, "team")
        await h.chat.press(reply.ref, STOP, sender="user-2")
        await h.chat.wait_for_text("only the person who asked", chat="team")
        await h.idle(timeout=20)
        assert "word59" in reply.text and "Stopped" not in reply.text
        assert reply.actions == ()


async def test_an_admin_may_stop_anybodys_answer(tmp_path, llm):
    chat = MemoryChannel("memory", admins=["boss"])
    async with Harness.running(make_settings(tmp_path, llm), channels={"memory": chat}) as h:
        slow_answer(llm)
        await h.chat.say("a long story please", **GROUP)
        reply = await live_reply(h, "team")
        await h.chat.press(reply.ref, STOP, sender="boss")
        await h.idle(timeout=20)
        assert reply.text.endswith("⏹ Stopped.")


async def test_a_press_delivered_twice_acts_once(tmp_path, llm):
    async with Harness.running(make_settings(tmp_path, llm)) as h:
        slow_answer(llm)
        await h.chat.say("tell me a long story")
        reply = await live_reply(h)
        press = h.chat.press_message(reply.ref, STOP)
        assert await h.chat.deliver(press) is True
        assert await h.chat.deliver(press) is False, "a redelivered press was accepted again"
        await h.idle(timeout=20)
        # One stop: the answer ends "⏹ Stopped." and nothing else was said (a second stop of the
        # same reply would answer "That reply has already finished.").
        assert [m.text[-10:] for m in h.chat.in_chat()] == ["⏹ Stopped."]


async def test_a_late_press_of_a_finished_answers_button_stops_nothing(tmp_path, llm):
    async with Harness.running(make_settings(tmp_path, llm)) as h:
        llm.script(Reply(text=" ".join(f"word{i}" for i in range(12)), chunk_size=3, delay=0.05))
        await h.chat.say("first question")
        first = await live_reply(h)
        late = h.chat.press_message(first.ref, STOP)  # pressed now, reaches us only later
        await h.idle(timeout=20)
        # The second answer waits mid-stream until the late press has been answered: it is certainly
        # still streaming when the press arrives (no 9 s stream sized as that margin).
        hold = Hold()
        words = " ".join(f"tale{i}" for i in range(200))
        llm.script(Reply(text=words, chunk_size=8, hold=hold, hold_after_chunks=10))
        await h.chat.say("second question")
        second = await h.chat.wait_for_text("tale3", timeout=20)
        await h.chat.deliver(late)
        await h.chat.wait_for_text("That reply has already finished.")
        hold.open()
        await h.idle(timeout=20)
        assert hold.passed == 1, "the press was handled while the second answer streamed"
        assert "tale199" in second.text and "Stopped" not in second.text
