"""The embedded agent runtime: a LangGraph tool-calling loop over the configured chat model, with a
checkpointer so a thread's history survives restarts.

Graph: ``model`` → (tool calls?) → ``tools`` → ``model`` … → end. The graph state holds only the
conversation; the system prompt (base prompt, sandbox guide, the owner's memory) is composed at call
time from per-run data kept outside the checkpoint, so what the model was told is never replayed to the
chat, never stored with the thread, and can change between turns (fresher memory).

Checkpointers: SQLite file by default; PostgreSQL (langgraph-checkpoint-postgres) when the database is
PostgreSQL and that package is installed; otherwise in-memory (history then lasts until restart).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import mimetypes
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import ValidationError

from agent.events import AgentEvent, TextDelta, ToolFinished, ToolStarted, TurnFinished, TurnRequest
from agent.goals import NOTHING_TO_ADD, GoalKeeper, GoalStore
from agent.memory import MemoryService, MemoryStore
from agent.models import ModelLoadError, build_chat_model
from agent.paths import ThreadPaths
from agent.sandbox import (
    LocalSandboxProvider,
    Sandbox,
    SandboxError,
    SandboxProvider,
    SecretMasker,
    StreamMasker,
)
from agent.tools import SANDBOX_GUIDE, TOOLS, ToolContext, short, tool_schemas
from config.schema import Settings

log = logging.getLogger(__name__)

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MAX_IMAGE_BYTES = 5 * 1024 * 1024
CANCELLED_TOOL_RESULT = "(not finished: the user stopped this turn before the tool completed)"


def message_text(message: BaseMessage) -> str:
    """Visible text of a message whose content may be a string or a list of content blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def without_images(message: BaseMessage) -> BaseMessage:
    """Images from an earlier vision turn, replaced by a note, for a model that cannot see them."""
    if isinstance(message.content, str) or not any(
        isinstance(b, dict) and b.get("type") == "image_url" for b in message.content
    ):
        return message
    text = message_text(message)
    return message.model_copy(update={"content": f"{text}\n[image omitted]".strip()})


@dataclass(slots=True)
class _Run:
    """Per-turn data the graph nodes need but the checkpoint must not store."""

    system_prompt: str
    context_prompt: str
    model: Any
    vision: bool
    tools: ToolContext
    texts: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0


def _postgres_conninfo(url: str) -> str | None:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return None
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


class AgentRuntime:
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
        self.sandbox_provider = sandbox_provider or LocalSandboxProvider()
        self._models: dict[str, Any] = dict(chat_models or {})
        self._bound: dict[str, Any] = {}
        self._runs: dict[str, _Run] = {}
        self._stack = AsyncExitStack()
        self._graph: Any = None
        self.checkpointer: BaseCheckpointSaver[Any] | None = None
        self.memory: MemoryService | None = None
        self.goals: GoalKeeper | None = None
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
        self.checkpointer = await self._open_checkpointer()
        self._graph = self._build_graph().compile(checkpointer=self.checkpointer)
        await asyncio.to_thread(self._warm_models)

    def _warm_models(self) -> None:
        """Build every configured model now, in a worker thread.

        Constructing the first model imports its provider SDK (seconds on a busy machine); doing that
        lazily inside the first turn blocked the event loop and every chat with it. A model that cannot
        be built is left for the turn to report in plain words (and for ``switchboard doctor``).
        """
        for cfg in self.settings.models:
            try:
                self.chat_model(cfg.name)
            except ModelLoadError as exc:
                log.warning("model %s is not usable yet: %s", cfg.name, exc)

    async def _open_checkpointer(self) -> BaseCheckpointSaver[Any]:
        if self.checkpoint_path is not None:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
            saver = await self._stack.enter_async_context(
                AsyncSqliteSaver.from_conn_string(str(self.checkpoint_path))
            )
            await saver.setup()  # WAL mode and tables
            # Wait for a lock instead of failing at once with "database is locked" (same as bot/db.py).
            await saver.conn.execute("PRAGMA busy_timeout=10000")
            # As for the main database: in WAL mode NORMAL survives a process crash (only an OS crash
            # can lose the last commits) and saves an fsync per checkpoint write.
            await saver.conn.execute("PRAGMA synchronous=NORMAL")
            return saver
        conninfo = _postgres_conninfo(self.settings.database.url)
        if conninfo is not None:
            try:
                from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
            except ImportError:
                log.warning(
                    "langgraph-checkpoint-postgres is not installed: thread history is kept in memory "
                    "only and is lost on restart (pip install langgraph-checkpoint-postgres)"
                )
            else:
                pg_saver = await self._stack.enter_async_context(
                    AsyncPostgresSaver.from_conn_string(conninfo)
                )
                await pg_saver.setup()
                return pg_saver
        return InMemorySaver()

    async def close(self) -> None:
        if self.memory is not None:
            await self.memory.close()
        await self.sandbox_provider.close()
        await self._stack.aclose()

    # --- models ------------------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return [m.name for m in self.settings.models]

    def chat_model(self, name: str | None) -> Any:
        cfg = self.settings.model_named(name if name in self.model_names() else None)
        if cfg.name not in self._models:
            self._models[cfg.name] = build_chat_model(cfg)
        return self._models[cfg.name]

    def tool_model(self, name: str | None) -> Any:
        """The model with our tools bound (or the plain model, if its class cannot call tools)."""
        cfg = self.settings.model_named(name if name in self.model_names() else None)
        if cfg.name not in self._bound:
            model = self.chat_model(cfg.name)
            try:
                self._bound[cfg.name] = model.bind_tools(tool_schemas())
            except (NotImplementedError, AttributeError):
                log.warning("model %s cannot call tools; it answers without them", cfg.name)
                self._bound[cfg.name] = model
        return self._bound[cfg.name]

    # --- graph -------------------------------------------------------------------------------------
    def _run_of(self, config: RunnableConfig) -> _Run:
        return self._runs[config["configurable"]["run_key"]]

    def _build_graph(self) -> StateGraph:
        async def call_model(state: MessagesState, config: RunnableConfig) -> dict[str, list[BaseMessage]]:
            run = self._run_of(config)
            # Two system messages: the operator's/channel's prompt verbatim, then our per-turn context.
            prompt = [SystemMessage(run.system_prompt), SystemMessage(run.context_prompt)]
            history = state["messages"] if run.vision else [without_images(m) for m in state["messages"]]
            response = await run.model.ainvoke([*prompt, *history], config)
            usage = getattr(response, "usage_metadata", None) or {}
            run.input_tokens += int(usage.get("input_tokens", 0))
            run.output_tokens += int(usage.get("output_tokens", 0))
            text = message_text(response)
            if text.strip():
                run.texts.append(text)
            return {"messages": [response]}

        async def call_tools(state: MessagesState, config: RunnableConfig) -> dict[str, list[BaseMessage]]:
            run = self._run_of(config)
            last = state["messages"][-1]
            assert isinstance(last, AIMessage)
            write = get_stream_writer()
            results: list[BaseMessage] = []
            for call in last.tool_calls:
                results.append(await self._call_tool(run, call["name"], call["args"], call["id"], write))
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

        def route(state: MessagesState) -> str:
            last = state["messages"][-1]
            if isinstance(last, AIMessage) and (last.tool_calls or last.invalid_tool_calls):
                return "tools"
            return END

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", call_tools)
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route, ["tools", END])
        graph.add_edge("tools", "model")
        return graph

    async def _call_tool(
        self, run: _Run, name: str, raw_args: dict[str, Any], call_id: str | None, write: Any
    ) -> ToolMessage:
        spec = TOOLS.get(name)
        mask = run.tools.masker
        if spec is None:
            return ToolMessage(
                content=f"Error: there is no tool named {name!r}. Tools: {', '.join(TOOLS)}.",
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
        ok = True
        try:
            output = await spec.handler(run.tools, args)
        except SandboxError as exc:
            ok, output = False, f"Error: {exc}"
        except Exception as exc:
            log.exception("tool %s failed", name)
            ok, output = False, f"Error: {name} failed unexpectedly ({type(exc).__name__})."
        write(ToolFinished(name, ok, summary))
        return ToolMessage(
            content=mask(output),
            tool_call_id=call_id or "",
            name=name,
            status="success" if ok else "error",
        )

    # --- turns -------------------------------------------------------------------------------------
    async def thread_messages(self, thread_id: str) -> list[BaseMessage]:
        """The stored conversation of a thread (memory extraction reads it)."""
        if self._graph is None:
            return []
        snapshot = await self._graph.aget_state({"configurable": {"thread_id": thread_id}})
        return list((snapshot.values or {}).get("messages", []))

    async def _dangling_tool_results(self, thread_id: str) -> list[BaseMessage]:
        """Tool calls left unanswered by a cancelled turn; the model API rejects history without them."""
        messages = await self.thread_messages(thread_id)
        last_ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        if last_ai is None:
            return []
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        calls: list[tuple[str | None, str | None]] = [(c["id"], c["name"]) for c in last_ai.tool_calls]
        calls += [(c.get("id"), c.get("name")) for c in last_ai.invalid_tool_calls]
        return [
            ToolMessage(
                content=CANCELLED_TOOL_RESULT, tool_call_id=cid, name=cname or "unknown", status="error"
            )
            for cid, cname in calls
            if cid and cid not in answered
        ]

    async def _user_message(self, request: TurnRequest, sandbox: Sandbox) -> HumanMessage:
        """The user's text; for a vision model, attached images are added as image blocks."""
        cfg = self.settings.model_named(request.model if request.model in self.model_names() else None)
        if not cfg.supports_vision or not request.attachments:
            return HumanMessage(request.text)
        blocks: list[str | dict[str, Any]] = [{"type": "text", "text": request.text}]
        for path in request.attachments:
            mime = mimetypes.guess_type(path)[0] or ""
            if mime not in IMAGE_TYPES:
                continue
            try:
                data = await sandbox.read_bytes(path, MAX_IMAGE_BYTES)
            except SandboxError as exc:
                log.info("not sending %s to the model: %s", path, exc)
                continue
            encoded = base64.b64encode(data).decode()
            blocks.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{encoded}"}})
        return HumanMessage(blocks if len(blocks) > 1 else request.text)

    async def _context_prompt(self, request: TurnRequest) -> str:
        """Per-turn context after the main system prompt: the sandbox guide, who is writing, memory."""
        parts = [SANDBOX_GUIDE]
        if request.sender_name:
            parts.append(f"The person writing is called {short(request.sender_name, 60)}.")
        if self.memory is not None:
            try:
                block = await self.memory.prompt_block(request.owner, request.text)
            except Exception as exc:  # memory is a bonus: never fail a turn over it
                log.warning("loading memory failed: %s", type(exc).__name__)
                block = ""
            if block:
                parts.append(block)
        return "\n\n".join(parts)

    async def run(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        if self._graph is None:
            raise RuntimeError("agent runtime not started")
        self.chat_model(request.model)  # fail fast with a ModelLoadError before touching the thread
        model = self.tool_model(request.model)
        paths = ThreadPaths(Path(self.settings.data_dir), request.owner, request.thread_id)
        sandbox = await self.sandbox_provider.acquire(paths)
        masker = SecretMasker.of(request.secrets)
        run = _Run(
            system_prompt=request.system_prompt or self.settings.agent.system_prompt,
            context_prompt=await self._context_prompt(request),
            model=model,
            vision=self.settings.model_named(
                request.model if request.model in self.model_names() else None
            ).supports_vision,
            tools=ToolContext(
                sandbox=sandbox,
                secrets=dict(request.secrets),
                masker=masker,
                command_timeout=self.settings.sandbox.command_timeout_seconds,
                max_output=self.settings.sandbox.max_output_chars,
            ),
        )
        key = uuid.uuid4().hex
        self._runs[key] = run
        config: RunnableConfig = {
            "configurable": {"thread_id": request.thread_id, "run_key": key},
            "recursion_limit": self.settings.agent.recursion_limit,
        }
        stream = StreamMasker(masker)
        last_id: str | None = None
        shown = False
        try:
            user = await self._user_message(request, sandbox)
            inputs = [*await self._dangling_tool_results(request.thread_id), user]
            async for mode, payload in self._graph.astream(
                {"messages": inputs}, config, stream_mode=["messages", "custom"]
            ):
                if mode == "custom":
                    if isinstance(payload, ToolStarted | ToolFinished):
                        yield payload
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
                visible = stream.feed(text)
                if visible:
                    shown = True
                    yield TextDelta(visible)
            tail = stream.flush()
            if tail:
                yield TextDelta(tail)
        finally:
            self._runs.pop(key, None)
            await sandbox.release()
        files = tuple(run.tools.files)
        final = masker("\n\n".join(t.strip() for t in run.texts))
        if not final:
            final = "📎 Here are the files." if files else NOTHING_TO_ADD
        yield TurnFinished(
            text=final,
            files=files,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
        )


__all__ = ["AgentRuntime", "ModelLoadError", "message_text"]
