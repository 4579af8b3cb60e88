"""Issue 32: an answer that is ready before its placeholder goes out reaches the chat as one message.

The agent (tests/foundation/instant_agent.py) is a test implementation of the Agent protocol that
answers at once, or waits until the test lets it go, so what the chat sees depends only on the reply path, not on a model's timing.
"""

from __future__ import annotations

from bot.inbox import DONE
from bot.turns import PLACEHOLDER, STOP_LABEL
from tests.conftest import make_settings
from tests.foundation.instant_agent import InstantAgent
from tests.harness import Harness


async def test_an_answer_ready_at_once_is_one_message_with_no_placeholder(tmp_path):
    async with Harness.running(make_settings(tmp_path), agent=InstantAgent()) as h:
        await h.chat.say("hi", message_id="m1")
        await h.idle()
        [(kind, ref, text)] = h.chat.calls
        assert (kind, text) == ("send", "ok: hi")
        assert h.chat.messages[ref].history == ["ok: hi"]
        assert h.chat.messages[ref].actions == ()  # no Stop button left on a finished answer
        # Its message is stored with the entry: a run after a crash edits it instead of answering twice.
        [entry] = await h.service.inbox.entries()
        assert (entry.status, entry.reply_ref) == (DONE, ref)


async def test_an_instant_answer_is_stored_with_its_done_mark_in_one_statement(tmp_path):
    """The answer's message id and the entry's done mark are one UPDATE in one commit, not a commit of
    the reference first (SQLite: the statements on the inbox's own connection)."""
    async with Harness.running(make_settings(tmp_path), agent=InstantAgent()) as h:
        sqlite = h.service.inbox._sqlite
        assert sqlite is not None
        statements: list[str] = []
        sqlite.conn.set_trace_callback(statements.append)
        await h.chat.say("hi", message_id="m1")
        await h.idle()
        sqlite.conn.set_trace_callback(None)
        [(_kind, ref, _text)] = h.chat.calls
        updates = [s for s in statements if s.startswith("UPDATE inbox")]
        assert len(updates) == 1, updates
        assert "status = 'done'" in updates[0] and "reply_state" in updates[0]
        [entry] = await h.service.inbox.entries()
        assert (entry.status, entry.reply_ref) == (DONE, ref)


async def test_an_answer_of_two_messages_stores_the_first_before_sending_the_second(tmp_path):
    """Only the last message's state joins the done mark: each earlier one is committed before the next
    message is sent, so a crash between them leaves nothing the restarted turn cannot find."""
    async with Harness.running(make_settings(tmp_path), agent=InstantAgent()) as h:
        sqlite = h.service.inbox._sqlite
        assert sqlite is not None
        updates: list[tuple[int, str]] = []  # (platform calls made so far, statement)

        def seen(statement: str) -> None:
            if statement.startswith("UPDATE inbox"):
                updates.append((len(h.chat.calls), statement))

        sqlite.conn.set_trace_callback(seen)
        await h.chat.say("x" * 5000, message_id="m1")  # the answer repeats it: two messages (limit 4000)
        await h.idle()
        sqlite.conn.set_trace_callback(None)
        assert [c[0] for c in h.chat.calls] == ["send", "send"]
        [(calls_first, first), (calls_last, last)] = updates
        assert calls_first == 1 and first.startswith("UPDATE inbox SET reply_ref")  # before the 2nd send
        assert calls_last == 2 and "status = 'done'" in last and "reply_state" in last


async def test_an_answer_that_takes_a_while_shows_the_placeholder_and_stop_first(tmp_path):
    agent = InstantAgent(wait=True)
    async with Harness.running(make_settings(tmp_path), agent=agent) as h:
        await h.chat.say("hi", message_id="m1")
        await h.chat.wait_for(lambda c: c.calls)
        [(kind, ref, text)] = h.chat.calls
        assert (kind, text) == ("send", PLACEHOLDER)
        assert [a.label for a in h.chat.messages[ref].actions] == [STOP_LABEL]
        # Stored before the answer comes: a crash now would leave no "…" behind nobody can find.
        [entry] = await h.service.inbox.entries()
        assert entry.reply_ref == ref
        agent.release.set()
        await h.idle()
        assert h.chat.messages[ref].history == [PLACEHOLDER, "ok: hi"]
        assert [c[0] for c in h.chat.calls] == ["send", "edit"]


async def test_a_message_behind_an_unsent_placeholder_queues_below_it(tmp_path):
    agent = InstantAgent(wait=True)
    async with Harness.running(make_settings(tmp_path), agent=agent) as h:
        await h.chat.say("first", message_id="m1")
        await h.chat.say("second", message_id="m2")
        await h.chat.wait_for(lambda c: len(c.calls) >= 2)
        first, queued = h.chat.calls[:2]
        assert first[2] == PLACEHOLDER
        assert queued[2].startswith("⏳ Queued")
        agent.release.set()
        await h.idle()
        assert [m.text for m in h.chat.messages.values()] == ["ok: first", "ok: second"]
