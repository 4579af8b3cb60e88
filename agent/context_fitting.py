"""Fitting a thread into the model's context: the prompt, the history budget, summaries of older
messages, and ``/compact``.

A mixin of :class:`agent.runtime.AgentRuntime`; the numbers are in agent/context.py.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from langchain_core.messages import (
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_NOSTREAM

from agent import context as ctxfit
from agent.checkpoint_pruning import prune_quietly
from agent.checkpoint_store import CheckpointStore
from agent.errors import ContextOverflowError, is_context_overflow
from agent.run_state import (
    AskedAgain,
    CompactResult,
    Run,
    ThreadChanged,
    ThreadState,
    message_text,
    without_images,
)
from agent.stream_end import was_cut

if TYPE_CHECKING:
    pass

from agent.runtime_models import ModelsAndTools

log = logging.getLogger(__name__)


class ContextFitting(ModelsAndTools):
    """Keeps each model call within its context window (summaries, budgets, ``/compact``)."""

    _graph: Any
    checkpoints: CheckpointStore

    def _prompt(self, run: Run, summary: str | None) -> list[BaseMessage]:
        # Two system messages: the operator's/channel's prompt verbatim, then our per-turn context; then
        # the running summary of older turns, if the thread has one.
        prompt: list[BaseMessage] = [SystemMessage(run.system_prompt), SystemMessage(run.context_prompt)]
        if summary:
            prompt.append(ctxfit.summary_message(summary))
        return prompt

    def _history_budget(self, run: Run) -> int:
        """Tokens left for the summary and the messages once prompts, tools and the answer are counted."""
        reserve = min(4096, run.context_tokens // 4)  # room for the model's answer
        # Every request carries the tool schemas the model is bound with (ours and MCP servers').
        schemas = self.offered_schemas(run.profile)
        fixed = ctxfit.messages_tokens(self._prompt(run, None)) + ctxfit.tools_tokens(schemas)
        budget = max(256, run.context_tokens - reserve - fixed)
        # A long thread is compacted well before a large window fills: every turn re-sends, re-estimates
        # and re-checkpoints the whole history, so its cost would otherwise grow with the thread.
        cap = self.settings.agent.compact_history_tokens
        return min(budget, max(256, cap)) if cap else budget

    async def _fit(
        self, run: Run, messages: list[BaseMessage], summary: str | None, *, hard: bool
    ) -> tuple[list[BaseMessage], list[BaseMessage], str | None]:
        """``(kept, removed, summary)``: the thread fitted into the budget, older units summarised.

        Normal fitting only acts when the thread is over budget and then keeps half of it, so it does
        not summarise on every turn; ``hard`` (after the provider refused the request) always compacts
        and keeps a fifth.
        """
        budget = self._history_budget(run)
        summary_tokens = ctxfit.estimate_text_tokens(summary or "")
        current = ctxfit.messages_tokens(messages)
        if not hard and current + summary_tokens <= budget:
            return messages, [], summary
        # After a refusal the configured window evidently overstates the real one: shrink what is there.
        keep = (
            int(budget * ctxfit.KEEP_FRACTION)
            if not hard
            else int(min(budget, current) * ctxfit.HARD_KEEP_FRACTION)
        )
        split = ctxfit.split_for_budget(messages, keep - min(summary_tokens, budget // 4))
        if not split.old:
            return messages, [], summary
        new_summary = await self._summarise(run, summary, split.old, budget)
        log.info(
            "compacted a thread: %d message(s) summarised, %d kept%s",
            len(split.old),
            len(split.recent),
            " (after a context overflow)" if hard else "",
        )
        return split.recent, split.old, new_summary

    async def _summarise(
        self, run: Run, previous: str | None, messages: list[BaseMessage], budget: int
    ) -> str:
        """Fold ``messages`` into the running summary with the conversation's model (no tools).

        The model call is tagged ``nostream`` so none of its text reaches the chat; a transcript too long
        for one request is folded in several passes.
        """
        model = self.chat_model(run.model_name).with_config(tags=[TAG_NOSTREAM])
        summary = previous
        limit = max(200, budget // 2)
        # The summary travels with every later request: at most a third of the history budget.
        cap = min(ctxfit.MAX_SUMMARY_CHARS, max(400, budget // 3 * 4))
        for lines in ctxfit.chunk_lines(ctxfit.transcript_lines(messages), limit):
            answer = await model.ainvoke(ctxfit.summary_request(summary, lines))
            run.count(getattr(answer, "usage_metadata", None))
            text = message_text(answer).strip()
            if text:
                summary = text[:cap]
        return summary or previous or ""

    async def _fit_or_give_up(
        self, run: Run, messages: list[BaseMessage], summary: str | None, *, hard: bool
    ) -> tuple[list[BaseMessage], list[BaseMessage], str | None]:
        """:meth:`_fit`, where a summariser request that is itself too long means the thread cannot fit."""
        try:
            return await self._fit(run, messages, summary, hard=hard)
        except Exception as exc:
            if is_context_overflow(exc):
                raise ContextOverflowError(run.model_name) from exc
            raise

    async def _call_fitted(
        self, run: Run, state: ThreadState, config: RunnableConfig
    ) -> tuple[BaseMessage, list[BaseMessage], str | None]:
        """Call the model with the thread fitted into its context; on an overflow compact harder, retry
        once, and then give up with :class:`ContextOverflowError` (a sentence the user can act on)."""
        messages: list[BaseMessage] = list(state["messages"])
        summary = state.get("summary") or None
        kept, removed, summary = await self._fit_or_give_up(run, messages, summary, hard=False)
        for attempt in (1, 2):
            history = kept if run.vision else [without_images(m) for m in kept]
            try:
                response = await self._invoke(run, [*self._prompt(run, summary), *history], config)
                return response, removed, summary
            except Exception as exc:
                if not is_context_overflow(exc):
                    raise
                log.warning("model %s reported a context overflow (attempt %d)", run.model_name, attempt)
                if attempt == 2:
                    raise ContextOverflowError(run.model_name) from exc
                kept, more, summary = await self._fit_or_give_up(run, kept, summary, hard=True)
                if not more:
                    raise ContextOverflowError(run.model_name) from exc
                removed = [*removed, *more]
        raise AssertionError("unreachable")

    async def _invoke(self, run: Run, messages: list[BaseMessage], config: RunnableConfig) -> BaseMessage:
        """One model call; asked once more when its stream was cut off (agent/stream_end.py). The cut
        attempt is dropped (its streamed text is withdrawn from the live reply); a second cut is kept
        and marked."""
        response: BaseMessage = await run.model.ainvoke(messages, config)
        if was_cut(response):
            log.warning(
                "model %s: the answer's stream ended without a finish reason; asking once more",
                run.model_name,
            )
            get_stream_writer()(AskedAgain())
            response = await run.model.ainvoke(messages, config)
            if was_cut(response):
                log.warning("model %s: the answer was cut off again; marking it incomplete", run.model_name)
        run.cut = was_cut(response)
        return response

    async def compact(self, thread_id: str, model: str | None) -> CompactResult:
        """``/compact``: fold everything before the latest user message into the thread's summary."""
        if self._graph is None:
            raise RuntimeError("agent runtime not started")
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        snapshot = await self._graph.aget_state(config)
        values = snapshot.values or {}
        messages: list[BaseMessage] = list(values.get("messages", []))
        summary: str | None = values.get("summary") or None
        before = ctxfit.messages_tokens(messages) + ctxfit.estimate_text_tokens(summary or "")
        last_user = max(
            (i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=len(messages)
        )
        old = messages[:last_user]
        if not old:
            return CompactResult(0, before, before)
        cfg = self.settings.model_named(model if model in self.model_names() else None)
        run = Run(
            system_prompt="",
            context_prompt="",
            model=None,
            vision=cfg.supports_vision,
            tools=None,  # type: ignore[arg-type]  # no tools: only the summariser runs
            model_name=cfg.name,
            context_tokens=cfg.context_tokens,
        )
        new_summary = await self._summarise(run, summary, old, self._history_budget(run))
        # Summarising takes a model call; if a turn wrote to the thread meanwhile, do not overwrite it.
        now = await self._graph.aget_state(config)
        if [m.id for m in (now.values or {}).get("messages", [])] != [m.id for m in messages]:
            raise ThreadChanged(thread_id)
        await self._graph.aupdate_state(
            config,
            {"messages": [RemoveMessage(id=m.id) for m in old if m.id], "summary": new_summary},
            as_node="model",
        )
        await prune_quietly(self.checkpoints.prune, thread_id)
        after = ctxfit.messages_tokens(messages[last_user:]) + ctxfit.estimate_text_tokens(new_summary)
        return CompactResult(len(old), before, after)
