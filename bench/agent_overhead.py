"""Benchmark: the agent runtime's own cost for a tool-calling turn (everything except the model).

One turn = model call → tool call → model call → final answer, through the real LangGraph graph, the
SQLite checkpointer (a file in a temp dir) and the real tools/sandbox. The chat model is an in-process
fake that answers instantly, and the time spent inside it is measured and subtracted, so what is left
is graph scheduling, checkpoint writes, event streaming, tool execution and sandbox set-up.

    python -m bench.agent_overhead --turns 200 --tool ls
    python -m bench.agent_overhead --turns 100 --tool bash                  # bash in the bwrap sandbox
    python -m bench.agent_overhead --turns 100 --tool bash --sandbox host   # bash on the host
    python -m bench.agent_overhead --commands 200 --sandbox bwrap          # one `true` per sample, no graph
    python -m bench.agent_overhead --commands 200 --network off            # the same without the egress relay
    python -m bench.agent_overhead --commands 300 --sandbox both           # bwrap and host interleaved, ratios
    python -m bench.agent_overhead --commands 300 --sandbox both --busy 4  # ... with 4 busy-looping processes

Prints ms/turn (mean, p50, p95) of runtime overhead, or ms per command for ``--commands`` (with p99; with
``--sandbox both`` also bwrap/host per percentile). ``--busy N`` keeps N ``python -c 'while 1: pass'``
processes running while it measures (a machine under load).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from agent.events import TurnFinished, TurnRequest
from agent.paths import ThreadPaths
from agent.runtime import AgentRuntime
from agent.sandboxes import build_sandbox_provider
from config.loader import load_settings
from config.schema import Settings

TOOL_CALLS = {
    "ls": {"name": "ls", "args": {"path": "/mnt/user-data/workspace"}},
    "bash": {"name": "bash", "args": {"command": "echo hi"}},
    "write_file": {"name": "write_file", "args": {"path": "note.txt", "content": "hello"}},
}


class InstantToolModel(BaseChatModel):
    """Asks for one tool call, then answers; records how long it spent answering."""

    tool: str = "ls"
    spent: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "instant-tool-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> InstantToolModel:  # type: ignore[override]
        return self

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            message = AIMessage(content="done")
        else:
            call = dict(TOOL_CALLS[self.tool], id=f"call_{uuid.uuid4().hex[:8]}", type="tool_call")
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return self._answer(messages)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        started = time.perf_counter()
        result = self._answer(messages)
        self.spent += time.perf_counter() - started
        return result


def bench_settings(tmp: str, sandbox: str, network: bool = True) -> Settings:
    return load_settings(
        overrides={
            "data_dir": str(Path(tmp) / "data"),
            "models": [{"name": "default", "api_key": "unused"}],
            "memory": {"enabled": False},
            "sandbox": {"mode": sandbox, "network": network},
        },
        env={},
    )


def summary(samples: list[float]) -> str:
    samples.sort()
    p95 = samples[int(len(samples) * 0.95) - 1]
    return (
        f"mean {statistics.mean(samples):.1f} ms, p50 {statistics.median(samples):.1f} ms, p95 {p95:.1f} ms"
    )


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


@contextlib.contextmanager
def busy(count: int):  # type: ignore[no-untyped-def]
    """``count`` processes that burn a core each, for as long as the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


async def commands(count: int, sandbox: str, network: bool, hogs: int = 0) -> None:
    """The cost of starting one command in the sandbox, and nothing else (``both``: interleaved)."""
    modes = ["bwrap", "host"] if sandbox == "both" else [sandbox]
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        boxes, providers = {}, []
        for mode in modes:
            settings = bench_settings(f"{tmp}/{mode}", mode, network)
            provider = build_sandbox_provider(settings.sandbox)
            await provider.start()
            providers.append(provider)
            boxes[mode] = await provider.acquire(ThreadPaths(Path(tmp) / mode / "data", "bench", "bench"))
        try:
            with busy(hogs):
                for i in range(count + 5):
                    for mode in modes:
                        started = time.perf_counter()
                        result = await boxes[mode].run("true", secrets={}, time_limit=30, max_output=1000)
                        assert result.exit_code == 0, result.output
                        if i >= 5:  # warm-up; the first bwrap command also starts the thread's sandbox
                            samples[mode].append((time.perf_counter() - started) * 1000)
        finally:
            for box in boxes.values():
                await box.release()
            for provider in providers:
                await provider.close()
    load = f" busy={hogs}" if hogs else ""
    for mode in modes:
        where = f"sandbox={mode}" + (f" network={'on' if network else 'off'}" if mode == "bwrap" else "")
        p99 = percentile(samples[mode], 0.99)
        print(
            f"{where}{load} commands={count}: one `true` command {summary(samples[mode])}, p99 {p99:.1f} ms"
        )
    if len(modes) == 2:
        bwrap, host = samples["bwrap"], samples["host"]
        p50 = statistics.median(bwrap) / statistics.median(host)
        p99 = percentile(bwrap, 0.99) / percentile(host, 0.99)
        print(f"bwrap/host{load}: p50 {p50:.2f}x, p99 {p99:.2f}x")


async def main(turns: int, tool: str, same_thread: bool, sandbox: str, network: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = bench_settings(tmp, sandbox, network)
        model = InstantToolModel(tool=tool)
        runtime = AgentRuntime(
            settings, checkpoint_path=Path(tmp) / "checkpoints.db", chat_models={"default": model}
        )
        await runtime.start()
        samples: list[float] = []
        try:
            for i in range(turns + 5):
                thread = "bench-thread" if same_thread else f"bench-{i}"
                request = TurnRequest(thread_id=thread, owner="bench", text=f"turn {i}")
                model.spent = 0.0
                started = time.perf_counter()
                final = None
                async for event in runtime.run(request):
                    if isinstance(event, TurnFinished):
                        final = event
                elapsed = time.perf_counter() - started - model.spent
                assert final is not None and final.text == "done", final
                if i >= 5:  # warm-up: imports, first checkpoint table creation
                    samples.append(elapsed * 1000)
        finally:
            await runtime.close()
    print(
        f"tool={tool} sandbox={sandbox} network={'on' if network else 'off'} turns={turns} thread={'same' if same_thread else 'new each turn'}: "
        f"runtime overhead per tool-calling turn {summary(samples)}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--tool", choices=sorted(TOOL_CALLS), default="ls")
    parser.add_argument("--same-thread", action="store_true", help="grow one thread instead of new threads")
    parser.add_argument("--sandbox", choices=["bwrap", "host", "both"], default="bwrap")
    parser.add_argument("--busy", type=int, default=0, help="busy-looping processes while measuring")
    parser.add_argument("--commands", type=int, default=0, help="time N bare commands instead of turns")
    parser.add_argument(
        "--network", choices=["on", "off"], default="on", help="sandbox.network (off: no egress relay)"
    )
    args = parser.parse_args()
    if args.commands:
        asyncio.run(commands(args.commands, args.sandbox, args.network == "on", args.busy))
    else:
        asyncio.run(main(args.turns, args.tool, args.same_thread, args.sandbox, args.network == "on"))
