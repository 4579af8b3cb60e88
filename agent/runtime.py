"""The embedded agent runtime: a LangGraph graph over the configured chat model, with a checkpointer so a
thread's history survives restarts.

The graph state holds only the conversation; the system prompt is added at call time, so what the model
was told is never replayed to the chat and can change between turns (e.g. fresher memory).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from agent.events import AgentEvent, TextDelta, TurnFinished, TurnRequest
from agent.models import ModelLoadError, build_chat_model
from config.schema import Settings

log = logging.getLogger(__name__)


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


class AgentRuntime:
    """Implements :class:`agent.events.Agent` with LangGraph."""

    def __init__(
        self,
        settings: Settings,
        *,
        checkpoint_path: Path | None = None,
        chat_models: dict[str, Any] | None = None,
        engine: Any = None,
    ) -> None:
        self.settings = settings
        self.engine = engine  # the service's AsyncEngine, for tables the agent owns
        self.checkpoint_path = checkpoint_path
        self._models: dict[str, Any] = dict(chat_models or {})
        self._stack = AsyncExitStack()
        self._graph: Any = None
        self.checkpointer: BaseCheckpointSaver[Any] | None = None

    async def start(self) -> None:
        if self.checkpoint_path is not None:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
            self.checkpointer = await self._stack.enter_async_context(
                AsyncSqliteSaver.from_conn_string(str(self.checkpoint_path))
            )
        else:
            self.checkpointer = InMemorySaver()
        self._graph = self._build_graph().compile(checkpointer=self.checkpointer)

    async def close(self) -> None:
        await self._stack.aclose()

    def model_names(self) -> list[str]:
        return [m.name for m in self.settings.models]

    def chat_model(self, name: str | None) -> Any:
        cfg = self.settings.model_named(name if name in self.model_names() else None)
        if cfg.name not in self._models:
            self._models[cfg.name] = build_chat_model(cfg)
        return self._models[cfg.name]

    def _build_graph(self) -> StateGraph:
        async def call_model(state: MessagesState, config: RunnableConfig) -> dict[str, list[BaseMessage]]:
            conf = config["configurable"]
            model = self.chat_model(conf.get("model_name"))
            system = SystemMessage(conf.get("system_prompt") or self.settings.agent.system_prompt)
            response = await model.ainvoke([system, *state["messages"]], config)
            return {"messages": [response]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_edge(START, "model")
        graph.add_edge("model", END)
        return graph

    async def run(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        if self._graph is None:
            raise RuntimeError("agent runtime not started")
        self.chat_model(request.model)  # fail fast with a ModelLoadError before touching the thread
        config: RunnableConfig = {
            "configurable": {
                "thread_id": request.thread_id,
                "model_name": request.model,
                "system_prompt": request.system_prompt,
            },
            "recursion_limit": self.settings.agent.recursion_limit,
        }
        streamed: list[str] = []
        async for chunk, _meta in self._graph.astream(
            {"messages": [HumanMessage(request.text)]}, config, stream_mode="messages"
        ):
            if isinstance(chunk, AIMessageChunk | AIMessage):
                text = message_text(chunk)
                if text:
                    streamed.append(text)
                    yield TextDelta(text)
        state = await self._graph.aget_state(config)
        messages = state.values.get("messages", [])
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        final = message_text(last) if last is not None else "".join(streamed)
        usage = getattr(last, "usage_metadata", None) or {}
        yield TurnFinished(
            text=final,
            input_tokens=int(usage.get("input_tokens", 0)),
            output_tokens=int(usage.get("output_tokens", 0)),
        )


__all__ = ["AgentRuntime", "ModelLoadError", "message_text"]
