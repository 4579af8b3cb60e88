"""A reload that rebuilds the models closes the replaced models' connection pools, and a turn that was
running on a replaced model still finishes on it: counted at the fake model server's sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bot.reload import apply
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Hold, Reply, ToolCall, prompt_text
from tests.harness import Harness

RELOADS = 3


async def until(check: Callable[[], bool], what: str, timeout: float = 15) -> None:
    """Poll ``check`` (a closed pool reaches the server as an end of stream, a moment later)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(what)
        await asyncio.sleep(0.05)


async def test_reloads_close_the_replaced_models_connections_and_a_turn_in_flight_finishes(
    tmp_path, llm: FakeOpenAI
) -> None:
    settings = make_settings(tmp_path, llm, sandbox={"mode": "host"})
    hold = Hold()
    # The long turn: its first model call waits at the fake across every reload, asks for a command,
    # and the turn's second model call (after the command) is made on the model it started with.
    llm.script_for(
        "LONGJOB",
        Reply(tool_calls=[ToolCall("bash", {"command": "echo step-one-ran"})], hold=hold),
        Reply(text="the long job is done"),
    )
    async with Harness.running(settings) as h:
        assert await h.ask("hi", chat="other") == "echo: hi"
        await h.chat.say("LONGJOB: run the first step", chat="long")
        await asyncio.to_thread(hold.wait_for_waiting, 1)

        base = [m.model_dump() for m in settings.models]
        for n in range(1, RELOADS + 1):
            models = [{**base[0], "model": f"fake-reloaded-{n}"}, base[1]]
            report = await apply(
                h.service, make_settings(tmp_path, llm, sandbox={"mode": "host"}, models=models)
            )
            assert report.applied == ["models"] and not report.problems
            await h.chat.say(f"after reload {n}", chat="other")  # opens the new model's pool
            await h.chat.wait_for_text(f"echo: after reload {n}", chat="other", timeout=30)
        assert llm.completions[-1]["model"] == f"fake-reloaded-{RELOADS}"

        # Left open: the held call's connection (the first model's, in use) and the newest model's pool.
        # Without closing, each reload's pool stayed too: RELOADS + 1.
        await until(lambda: llm.open_connections() == 2, f"{llm.open_connections()} connections open, not 2")

        hold.release()
        await h.chat.wait_for_text("the long job is done", chat="long", timeout=30)
        await h.idle()
        long_calls = [body for body in llm.completions if "LONGJOB" in prompt_text(body)]
        assert [body["model"] for body in long_calls] == ["fake-model", "fake-model"], "kept its model"
        assert "step-one-ran" in str(long_calls[1]["messages"][-1]["content"]), "the command's result"

        # The turn is over: the model it held is closed too; only the newest model's pool is open.
        await until(lambda: llm.open_connections() == 1, f"{llm.open_connections()} connections open, not 1")
