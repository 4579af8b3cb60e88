"""A GitHub delivery's response names the trace of the turn it started (``X-Trace-Id``, bot/tracing.py)."""

from __future__ import annotations

import logging

from bot import tracing
from tests.fakes.openai_server import Reply
from tests.github.conftest import BOT, comment_payload, github_settings, running_service


async def test_a_delivery_response_carries_the_trace_id_of_the_turn_it_started(tmp_path, llm, github, caplog):
    caplog.set_level(logging.INFO)
    llm.script(Reply(text="Looked at it."))
    settings = github_settings(tmp_path, llm, github)
    async with running_service(settings) as sb:
        response = await sb.deliver("issue_comment", comment_payload(f"@{BOT} please look"))
        await sb.idle()
        [entry] = await sb.service.inbox.entries()

    assert response.status_code == 200
    trace_id = response.headers["X-Trace-Id"]
    assert tracing.trace_id_of(entry.message) == trace_id
    turn = next(r for r in caplog.records if r.name == "switchboard.turn")
    assert turn.fields["trace_id"] == trace_id  # type: ignore[attr-defined]
