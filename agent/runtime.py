"""The embedded agent runtime: a LangGraph tool-calling loop over the configured chat model, with a
checkpointer so a thread's history survives restarts.

Graph: ``model`` → (tool calls?) → ``tools`` → ``model`` … → end. The graph state holds only the
conversation; the system prompt (base prompt, sandbox guide, the owner's memory) is composed at call
time from per-run data kept outside the checkpoint, so what the model was told is never replayed to the
chat, never stored with the thread, and can change between turns (fresher memory).

Checkpoints: agent/checkpoint_store.py (SQLite file, PostgreSQL, or in memory); the per-turn state the
graph nodes share: agent/run_state.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import END, START, StateGraph
from pydantic import ValidationError

from agent import context as ctxfit
from agent.approval import RiskPolicy
from agent.checkpoint_pruning import prune_quietly
from agent.checkpoint_store import CheckpointStore
from agent.context_fitting import ContextFitting
from agent.events import (
    AgentEvent,
    TextDelta,
    TextWithdrawn,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnRequest,
)
from agent.goals import NOTHING_TO_ADD, GoalKeeper, GoalStore
from agent.long_tools import LongCalls
from agent.mcp_tools import McpHub
from agent.memory import MemoryService, MemoryStore
from agent.models import ModelLoadError
from agent.paths import ThreadPaths
from agent.run_state import (
    AskedAgain,
    CompactResult,
    Run,
    ThreadChanged,
    ThreadState,
    message_text,
)
from agent.sandbox import (
    SandboxError,
    SandboxProvider,
    SecretMasker,
    StreamMasker,
)
from agent.sandboxes import build_sandbox_provider
from agent.skills import Skill, load_skills
from agent.stream_end import CUT_NOTE
from agent.subagents import (
    Note,
    Session,
    SubagentKind,
    Subagents,
    WatchedApprovals,
    run_tool_calls,
    subagent_profile,
)
from agent.task_store import TaskStore
from agent.tools import TOOLS, ToolContext, ToolSpec, mcp_tool_spec
from agent.turn_input import ResumeTask, TurnInput
from agent.usage import UsageStore
from agent.web import WebFetcher, WebSearcher
from config.schema import Settings
from config.secrets import known_secrets

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

#: The agent run's name in LangSmith / Langfuse (its metadata carries the trace id, provider, thread).
RUN_NAME = "switchboard turn"


class AgentRuntime(ContextFitting, TurnInput):
    """Implements :class:`agent.events.Agent` with LangGraph."""

    def __init__(
        self,
        settings: Settings,
        *,
        checkpoint_path: Path | None = None,
        chat_models: dict[str, Any] | None = None,
        engine: Any = None,
        sandbox_provider: SandboxProvider | None = None,
    ) -> None:
        self.settings = settings
        self.engine = engine  # the service's AsyncEngine, for tables the agent owns
        self.checkpoint_path = checkpoint_path
        self.skills_dir = Path(settings.skills_dir)
        self.skills: dict[str, Skill] = {}
        self.sandbox_provider = sandbox_provider or build_sandbox_provider(
            settings.sandbox, skills_dir=self.skills_dir
        )
        # Masked in every tool result, progress line and reply, on top of each run's own secrets.
        self.known_secrets = known_secrets(settings, os.environ)
        self.mcp = McpHub(settings.mcp_servers, settings.sandbox) if settings.mcp_servers else None
        #: Tools from MCP servers, known once start() has connected to them.
        self.extra_tools: dict[str, ToolSpec] = {}
        self.web = WebFetcher(settings.web) if settings.web.fetch else None
        self.search = WebSearcher(settings.web) if settings.web.search_url else None
        self.risk = RiskPolicy(settings.sandbox.approval, settings.sandbox.risky_patterns)
        off = {"load_skill"}  # offered once start() has found skills
        off |= {"web_fetch"} if self.web is None else set()
        off |= {"web_search"} if self.search is None else set()
        off |= set() if settings.agent.subagents.enabled else {"task"}
        self.disabled_tools: frozenset[str] = frozenset(off)
        self._models: dict[str, Any] = dict(chat_models or {})
        self._bound: dict[tuple[str, ...], Any] = {}
        self._runs: dict[str, Run] = {}
        self._stack = AsyncExitStack()
        self._graph: Any = None
        self.checkpointer: BaseCheckpointSaver[Any] | None = None
        self.checkpoints = CheckpointStore(settings.database.url, checkpoint_path, self._stack)
        self.memory: MemoryService | None = None
        self.goals: GoalKeeper | None = None
        self.usage: UsageStore | None = UsageStore(engine) if engine is not None else None
        #: Subagent tasks and their steps (agent/task_store.py), readable after the turn.
        self.tasks: TaskStore | None = TaskStore(engine) if engine is not None else None
        if engine is not None:
            if settings.memory.enabled:
                self.memory = MemoryService(
                    settings.memory,
                    MemoryStore(engine),
                    chat_model=self.chat_model,
                    transcript=self.thread_messages,
                )
            self.goals = GoalKeeper(
                GoalStore(engine),
                chat_model=self.chat_model,
                max_continuations=settings.agent.max_goal_continuations,
            )

    # --- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.sandbox_provider.start()
        if self.mcp is not None:
            await self.mcp.start()  # a server that fails is reported, never fatal
            specs = [mcp_tool_spec(self.mcp, tool) for tool in self.mcp.tools()]
            self.extra_tools = {spec.name: spec for spec in specs if spec.name not in TOOLS}
        self.skills = await asyncio.to_thread(load_skills, self.skills_dir)
        if self.skills:
            self.disabled_tools -= {"load_skill"}
            log.info("skills: %s", ", ".join(self.skills))
        self.checkpointer = await self.checkpoints.open()
        self._graph = self._build_graph().compile(checkpointer=self.checkpointer)
        if self.memory is not None:
            await self.memory.start()  # extractions a previous run left pending
        await asyncio.to_thread(self._warm_models)

    async def storage_problem(self) -> str | None:
        """None when the checkpointer can reach its store now; otherwise why not (for /health, /ready)."""
        return await self.checkpoints.problem()

    async def close(self) -> None:
        if self.mcp is not None:
            await self.mcp.close()
        if self.memory is not None:
            await self.memory.close()
        await self.sandbox_provider.close()
        await self._stack.aclose()

    # --- models ------------------------------------------------------------------------------------

    # --- graph -------------------------------------------------------------------------------------
    def _run_of(self, config: RunnableConfig) -> Run:
        return self._runs[config["configurable"]["run_key"]]

    def _build_graph(self) -> StateGraph:
        async def call_model(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
            run = self._run_of(config)
            response, removed, summary = await self._call_fitted(run, state, config)
            run.count(getattr(response, "usage_metadata", None))
            text = message_text(response)
            if text.strip():
                run.texts.append(text)
            update: dict[str, Any] = {
                "messages": [*(RemoveMessage(id=m.id) for m in removed if m.id), response]
            }
            if summary != state.get("summary"):
                update["summary"] = summary
            return update

        async def call_tools(state: ThreadState, config: RunnableConfig) -> dict[str, list[BaseMessage]]:
            run = self._run_of(config)
            last = state["messages"][-1]
            assert isinstance(last, AIMessage)
            write = get_stream_writer()
            # `task` calls run at once (agent/subagents.py); every other call in order.
            results: list[BaseMessage] = list(
                await run_tool_calls(
                    last.tool_calls,
                    lambda call: self._call_tool(run, call["name"], call["args"], call["id"], write),
                )
            )
            for bad in last.invalid_tool_calls:
                results.append(
                    ToolMessage(
                        content=f"Error: the arguments for {bad.get('name')} were not valid JSON.",
                        tool_call_id=bad.get("id") or "",
                        name=bad.get("name") or "unknown",
                        status="error",
                    )
                )
            return {"messages": results}

        def route(state: ThreadState) -> str:
            last = state["messages"][-1]
            if isinstance(last, AIMessage) and (last.tool_calls or last.invalid_tool_calls):
                return "tools"
            return END

        graph = StateGraph(ThreadState)
        graph.add_node("model", call_model)
        graph.add_node("tools", call_tools)
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route, ["tools", END])
        graph.add_edge("tools", "model")
        return graph

    # --- context window ----------------------------------------------------------------------------

    async def _call_tool(
        self, run: Run, name: str, raw_args: dict[str, Any], call_id: str | None, write: Any
    ) -> ToolMessage:
        spec = TOOLS.get(name) if name not in self.disabled_tools else None
        spec = spec or self.extra_tools.get(name)
        mask = run.tools.masker
        if spec is not None and not run.profile.allows(name, is_mcp=name in self.extra_tools):
            log.info("refused tool %s under profile %s", name, run.profile.name)
            return ToolMessage(
                content=f"Refused: `{name}` is not available in this conversation: {run.profile.why}.",
                tool_call_id=call_id or "",
                name=name,
                status="error",
            )
        if spec is None:
            return ToolMessage(
                content=f"Error: there is no tool named {name!r}. Tools: {', '.join(self.tool_names())}.",
                tool_call_id=call_id or "",
                name=name,
                status="error",
            )
        try:
            args = spec.args.model_validate(raw_args)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return ToolMessage(
                content=f"Error: bad arguments for {name}: {problems}",
                tool_call_id=call_id or "",
                name=name,
                status="error",
            )
        summary = spec.summarize(args, mask)
        write(ToolStarted(name, summary))
        ctx = replace(run.tools, call_id=call_id or "")
        # A call still running after agent.long_tool_seconds gets a task card (a subagent has its own).
        calls = run.tools.long_calls if name != "task" else None
        watch = calls.watch(name, ctx.call_id, summary) if calls is not None else None
        if watch is not None and ctx.approvals is not None:
            ctx.approvals = WatchedApprovals(ctx.approvals, watch.note)  # waiting for a yes is not running
        ok = True
        try:
            work = spec.handler(ctx, args)
            output = await (work if watch is None else watch.run(work))
        except SandboxError as exc:
            ok, output = False, f"Error: {exc}"
        except Exception as exc:
            log.exception("tool %s failed", name)
            ok, output = False, f"Error: {name} failed unexpectedly ({type(exc).__name__})."
        output = mask(output)
        if watch is not None:
            await watch.end(ok, output)
            ok = ok and not watch.stopped
        write(ToolFinished(name, ok, summary))
        return ToolMessage(
            content=output,
            tool_call_id=call_id or "",
            name=name,
            status="success" if ok else "error",
        )

    # --- subagents (agent/subagents.py) ------------------------------------------------------------
    def _task_resumer(self, run: Run) -> ResumeTask:
        """Runs again a ``task`` call, or a long tool call that had a card, that a killed turn left
        unanswered (see ``_dangling_tool_results``); None for any other call."""

        async def resume(name: str, args: dict[str, Any], call_id: str) -> ToolMessage | None:
            def rerun() -> Awaitable[ToolMessage]:
                return self._call_tool(run, name, args, call_id, lambda _event: None)

            if name == "task":
                return None if run.tools.subagents is None else await rerun()
            if run.tools.long_calls is None:
                return None
            return await run.tools.long_calls.resume(name, call_id, rerun)

        return resume

    def _long_calls(self, request: TurnRequest) -> LongCalls | None:
        """The turn's watcher of long tool calls; None when they get no card (off, or nowhere to show)."""
        after = self.settings.agent.long_tool_seconds
        if not after or request.tasks is None:
            return None
        return LongCalls(after=after, thread_id=request.thread_id, reporter=request.tasks, store=self.tasks)

    def _delegator(self, request: TurnRequest, run: Run, paths: ThreadPaths) -> Subagents | None:
        """The ``task`` tool's delegator for this turn; None when the tool is off for it."""
        if "task" in self.disabled_tools or not run.profile.allows("task"):
            return None

        async def opener(kind: SubagentKind, child: Subagents, task_id: str, note: Note) -> Session:
            return await self._open_subagent(run, paths, kind, child, note)

        return Subagents(
            self.settings.agent.subagents,
            thread_id=request.thread_id,
            store=self.tasks,
            reporter=request.tasks,
            opener=opener,
        )

    async def _open_subagent(
        self, turn: Run, paths: ThreadPaths, kind: SubagentKind, child: Subagents, note: Note
    ) -> Session:
        """A subagent's model, tools and sandbox: the turn's checks, approvals and secrets, narrowed to
        the kind's tools, on a sandbox handle of its own (closing it kills what the subagent started).
        Its tokens count towards the turn's usage."""
        profile = subagent_profile(turn.profile, kind, self.tool_names(), nested=child.may_delegate)
        cfg = self._model_config(kind.model or turn.model_name)
        model = self.tool_model(cfg.name, profile).with_config(tags=[TAG_NOSTREAM])
        sandbox = await self.sandbox_provider.acquire(paths)
        sub = Run(
            system_prompt=kind.system_prompt,
            context_prompt="",
            model=model,
            vision=False,
            tools=replace(
                turn.tools,
                sandbox=sandbox,
                subagents=child,
                call_id="",
                long_calls=None,  # its calls show on its own card
                approvals=WatchedApprovals(turn.tools.approvals, note) if turn.tools.approvals else None,
            ),
            model_name=cfg.name,
            context_tokens=cfg.context_tokens,
            profile=profile,
        )

        async def ask(messages: list[BaseMessage]) -> BaseMessage:
            response: BaseMessage = await model.ainvoke(messages)
            usage = response.usage_metadata if isinstance(response, AIMessage) else None
            if usage is not None:
                turn.input_tokens += usage["input_tokens"]
                turn.output_tokens += usage["output_tokens"]
            return response

        async def call_tool(name: str, args: dict[str, Any], call_id: str | None, write: Any) -> ToolMessage:
            return await self._call_tool(sub, name, args, call_id, write)

        return Session(
            context=f"{self.sandbox_provider.guide()}\n\n{self._clock_line()}",
            ask=ask,
            call_tool=call_tool,
            mask=turn.tools.masker,
            close=sandbox.release,
            sandbox=sandbox,
            approvals=sub.tools.approvals if isinstance(sub.tools.approvals, WatchedApprovals) else None,
            trust=turn.tools.trust,
        )

    # --- turns -------------------------------------------------------------------------------------

    async def run(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        if self._graph is None:
            raise RuntimeError("agent runtime not started")
        self.chat_model(request.model)  # fail fast with a ModelLoadError before touching the thread
        profile = request.profile
        model = self.tool_model(request.model, profile, request.fallbacks)
        # Credentials only reach the sandbox of a turn whose profile may see them (never a guest's).
        secrets = dict(request.secrets) if profile.secrets else {}
        paths = ThreadPaths(Path(self.settings.data_dir), request.owner, request.thread_id)
        sandbox = await self.sandbox_provider.acquire(paths)
        masker = SecretMasker.of(secrets, self.known_secrets)
        run = Run(
            system_prompt=request.system_prompt or self.settings.agent.system_prompt,
            context_prompt=await self._context_prompt(request),
            model=model,
            vision=self._model_config(request.model).supports_vision,
            model_name=self._model_config(request.model).name,
            context_tokens=self._model_config(request.model).context_tokens,
            profile=profile,
            tools=ToolContext(
                sandbox=sandbox,
                secrets=secrets,
                masker=masker,
                command_timeout=self.settings.sandbox.command_timeout_seconds,
                max_output=self.settings.sandbox.max_output_chars,
                web=self.web,
                search=self.search,
                skills=self._skills_for(profile),
                scheduler=request.scheduler,
                risk=self.risk
                if request.approval_mode is None
                else self.risk.with_mode(request.approval_mode),
                approvals=request.approvals,
                trust=request.trust,
            ),
        )
        run.tools.subagents = self._delegator(request, run, paths)
        run.tools.long_calls = self._long_calls(request)
        key = uuid.uuid4().hex
        self._runs[key] = run
        config: RunnableConfig = {
            "configurable": {"thread_id": request.thread_id, "run_key": key},
            "recursion_limit": self.settings.agent.recursion_limit,
            "run_name": RUN_NAME,
            "metadata": dict(request.metadata),
            "callbacks": list(request.callbacks),
        }
        stream = StreamMasker(masker)
        last_id: str | None = None
        shown = False
        # The current model message's visible characters, and whether text was shown before it: what a
        # cut-off answer asked for again takes back (agent/stream_end.py).
        current, shown_before = 0, False
        try:
            user = await self._user_message(request, sandbox)
            if request.hidden:  # a goal continuation: transcripts must not present it as the user's words
                user.id = f"{ctxfit.HIDDEN_ID_PREFIX}{uuid.uuid4().hex}"
            resume = self._task_resumer(run)
            inputs = [*await self._dangling_tool_results(request.thread_id, resume), user]
            async for mode, payload in self._graph.astream(
                {"messages": inputs}, config, stream_mode=["messages", "custom"]
            ):
                if mode == "custom":
                    if isinstance(payload, ToolStarted | ToolFinished):
                        yield payload
                    elif isinstance(payload, AskedAgain):
                        if current:
                            yield TextWithdrawn(current)
                        stream, current, shown, last_id = StreamMasker(masker), 0, shown_before, None
                    continue
                chunk, meta = payload
                if meta.get("langgraph_node") != "model" or not isinstance(chunk, AIMessageChunk | AIMessage):
                    continue
                text = message_text(chunk)
                if not text:
                    continue
                if chunk.id != last_id:
                    # A new model message after a tool call: keep the earlier text, start a new paragraph.
                    text = ("\n\n" + text) if shown else text
                    last_id = chunk.id
                    current, shown_before = 0, shown
                visible = stream.feed(text)
                if visible:
                    shown = True
                    current += len(visible)
                    yield TextDelta(visible)
        except Exception:
            # The model failed midway: what it already said (masked) is still the user's to see.
            tail = stream.flush()
            if tail:
                yield TextDelta(tail)
            raise
        else:
            tail = stream.flush()
            if tail:
                yield TextDelta(tail)
        finally:
            self._runs.pop(key, None)
            await sandbox.release()
        # The turn's last checkpoint is saved (the stream waits for its writes): drop the ones it superseded.
        await prune_quietly(self.checkpoints.prune, request.thread_id)
        await self._record_usage(request.thread_id, run)
        # Checked again now that nothing of the turn runs any more: a command may have swapped a presented
        # file for a symlink to a host file after present_files accepted it.
        files = tuple(await sandbox.deliverable(run.tools.files))
        final = masker("\n\n".join(t.strip() for t in run.texts))
        if not final:
            final = "📎 Here are the files." if files else NOTHING_TO_ADD
        if run.cut:
            final += f"\n\n{CUT_NOTE}"
        withheld = [path.name for path in run.tools.files if path not in files]
        if withheld:
            final += f"\n\n⚠️ Not sent: {', '.join(withheld)} changed after it was presented."
        yield TurnFinished(
            text=final,
            files=files,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cached_tokens=run.cached_tokens,
            model=run.model_name,
        )


__all__ = ["AgentRuntime", "CompactResult", "ModelLoadError", "ThreadChanged", "message_text"]
