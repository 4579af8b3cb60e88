"""Budgets per rate-limit scope: replies in different chats share a wider scope, and a final goes first.

Driven on the memory channel's transport with the real ReplyStream and budgets; a scope shared by two
chats stands for a Slack workspace's chat.update bucket or a Telegram group's cap.
"""

from __future__ import annotations

import asyncio

from channels.memory import MemoryChannel
from channels.reply import Pacing, RateBudget, ReplyStream
from channels.types import ReplyLimits

LIMITS = ReplyLimits(text_limit=4000, min_edit_interval=0.0)


def reply(chat: MemoryChannel, name: str, scope: RateBudget) -> ReplyStream:
    """A reply in chat ``name`` whose sends and edits also draw on the shared ``scope``."""
    pacing = Pacing(RateBudget(0.0), {"send": [scope], "edit": [scope]})
    return ReplyStream(chat.reply_transport(chat.make_message("hi", chat=name)), pacing, LIMITS)


def texts(chat: MemoryChannel) -> list[str]:
    return [text for operation, _ref, text in chat.calls if operation in ("send", "edit")]


async def test_a_final_goes_out_ahead_of_another_chats_pending_update_in_a_shared_scope():
    chat = MemoryChannel("memory", limits=LIMITS)
    scope = RateBudget(0.3, burst=1)
    streaming, answered = reply(chat, "chat-b", scope), reply(chat, "chat-a", scope)

    await streaming.start()  # takes the scope's only token
    placeholder = asyncio.create_task(answered.start())  # waits for the next one …
    await asyncio.sleep(0.05)
    streaming.update("b is still writing")  # … and this update queues behind it
    await placeholder
    await answered.finish("a's final answer")  # arrives after b's update was already waiting
    await streaming.finish("b's final answer")

    sent = texts(chat)
    a_final = sent.index("a's final answer")
    assert sent[a_final - 1] == "…", "a's final was the next call after a's placeholder"
    assert "b is still writing" not in sent[:a_final], "the final did not queue behind b's update"
    assert [m.text for m in chat.in_chat("chat-b")] == ["b's final answer"]


async def test_without_shared_scopes_replies_in_different_chats_do_not_wait_for_each_other():
    """The default (no shared budgets) is unchanged: one chat's slow budget holds only that chat."""
    chat = MemoryChannel("memory", limits=LIMITS)
    slow = ReplyStream(
        chat.reply_transport(chat.make_message("hi", chat="chat-slow")), RateBudget(1.0, burst=1), LIMITS
    )
    fast = ReplyStream(
        chat.reply_transport(chat.make_message("hi", chat="chat-fast")), RateBudget(0.0), LIMITS
    )
    await slow.start()
    slow.update("the slow chat's next update")  # waits a second for the slow chat's budget
    await asyncio.sleep(0.05)
    await fast.start()
    await fast.finish("fast answer")
    await slow.finish("slow answer")
    assert texts(chat) == ["…", "…", "fast answer", "slow answer"]
