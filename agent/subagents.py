"""Subagents: the ``task`` tool hands a self-contained job to a model with a context of its own.

Why a loop of its own instead of a second LangGraph run: a subagent's messages are not the thread's (it
starts from its brief alone and nothing of it is checkpointed into the conversation), it is bounded by
limits the turn does not have (model calls, wall-clock time, tokens) and it must end cleanly when a
person stops it. What it may touch comes from the runtime through a :class:`Session`: the same checks,
approvals, secret masking and thread files as the turn, but a sandbox handle of its own, so the
processes it started are killed when it ends.

Several ``task`` calls in one model message run at once (:func:`run_tool_calls`), at most
``max_concurrent`` per turn (the rest wait for a slot); a subagent may start subagents of its own only
below ``max_depth``. Every step is stored (:mod:`agent.task_store`) and shown on the chat's task card
(:class:`agent.events.TaskReporter`); the turn's model gets a short result.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import ToolCall

from agent.acp.client import Hooks, run_acp
from agent.errors import describe_error
from agent.events import (
    ApprovalDecision,
    ApprovalGate,
    TaskReporter,
    TaskStatus,
    ToolProfile,
    ToolStarted,
    TrustLevel,
)
from agent.sandbox import Sandbox, SandboxError
from agent.task_store import TaskStore
from agent.tools import short
from config.schema import GENERAL_SUBAGENT, SubagentsConfig
from config.secrets import SecretMasker

log = logging.getLogger(__name__)

GENERAL_PROMPT = (
    "You are a subagent: another assistant handed you one self-contained job. Do it with the tools you"
    " have, then answer with a concise result for that assistant: what you found or did, and where any"
    " files you made are. Nobody reads your intermediate text; only your last message is passed on."
)
SUBAGENT_NOTE = (
    "You work for another assistant, not directly for a person, and you see nothing of its conversation:"
    " your brief is the user message. Finish with the result; do not ask questions back."
)
DEPTH_REFUSAL = (
    "Refused: a subagent may not start subagents of its own here (agent.subagents.max_depth is {depth})."
    " Do the work yourself with your other tools."
)

#: The sync callback a tool call reports its progress line through (``ToolStarted``/``ToolFinished``).
Write = Callable[[object], None]


@dataclass(frozen=True, slots=True)
class SubagentKind:
    """``general`` or one of ``agent.subagents.profiles``."""

    name: str
    description: str
    system_prompt: str
    model: str | None = None
    tools: frozenset[str] | None = None
    #: A coding-agent command line run over ACP (:mod:`agent.acp`) instead of our own loop.
    acp: tuple[str, ...] | None = None
    #: Its process's own environment (``acp.env``: secrets) and read-only host paths (``acp.mounts``).
    acp_env: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    acp_mounts: tuple[str, ...] = ()


def kinds_of(config: SubagentsConfig) -> dict[str, SubagentKind]:
    kinds = {
        GENERAL_SUBAGENT: SubagentKind(
            GENERAL_SUBAGENT, "any self-contained job, with the same tools as you", GENERAL_PROMPT
        )
    }
    for profile in config.profiles:
        kinds[profile.name] = SubagentKind(
            profile.name,
            profile.description,
            profile.system_prompt,
            profile.model,
            frozenset(profile.tools) if profile.tools is not None else None,
            tuple(profile.acp.command) if profile.acp is not None else None,
            dict(profile.acp.env) if profile.acp is not None else {},
            tuple(profile.acp.mounts) if profile.acp is not None else (),
        )
    return kinds


def kinds_prompt(config: SubagentsConfig) -> str:
    """The line of the turn's context that tells the model which subagent kinds ``task`` takes."""
    listed = "; ".join(f"{k.name}: {short(k.description, 120)}" for k in kinds_of(config).values())
    return f"Subagent kinds for the task tool: {listed}."


def task_id_for(thread_id: str, call_id: str, parent_task_id: str | None = None) -> str:
    """The same id for the same tool call of the same thread, so a redelivered turn finds its task.

    A call without an id (a model that sends none) gets a random one: nothing could match it again anyway.
    """
    if not call_id:
        return f"task-{uuid.uuid4().hex[:20]}"
    digest = hashlib.sha256(f"{thread_id}\0{parent_task_id or ''}\0{call_id}".encode()).hexdigest()
    return f"task-{digest[:20]}"


def subagent_profile(
    parent: ToolProfile, kind: SubagentKind, available: Sequence[str], *, nested: bool
) -> ToolProfile:
    """What a subagent may use: what the turn may, narrowed to the kind's tools, and ``task`` only when
    it may start subagents itself. Never more than the turn that started it (a guest's turn has no
    ``task`` at all, so this is never reached for one)."""
    tools = {name for name in available if parent.allows(name)}
    if kind.tools is not None:
        tools &= kind.tools
    if not nested:
        tools.discard("task")
    return ToolProfile(
        name=f"{parent.name}/{kind.name}/{'nested' if nested else 'leaf'}/{','.join(sorted(tools))}",
        tools=frozenset(tools),
        mcp=parent.mcp,
        secrets=parent.secrets,
        why=f"this subagent ({kind.name}) may use only: {', '.join(sorted(tools)) or 'no tools'}",
    )


@dataclass(slots=True)
class Session:
    """What the runtime lends one subagent for its run (agent/runtime.py builds it)."""

    #: Its second system message: the sandbox guide and the clock, as a turn has them.
    context: str
    #: One model call with its tools bound (nothing of it streams to the chat).
    ask: Callable[[list[BaseMessage]], Awaitable[BaseMessage]]
    #: One tool call under the subagent's profile, with the turn's checks, approvals and masking.
    call_tool: Callable[[str, dict[str, Any], str | None, Write], Awaitable[ToolMessage]]
    #: Masks known secrets in text that is stored or shown.
    mask: Callable[[str], str]
    #: Ends the session: kills the sandbox processes it started.
    close: Callable[[], Awaitable[None]]
    #: Its sandbox handle and the chat's approvals, for a coding agent over ACP (None: not lent).
    sandbox: Sandbox | None = None
    approvals: WatchedApprovals | None = None
    trust: TrustLevel = "member"


#: A line for the task's card and steps, with the status it puts the task in.
Note = Callable[[str, TaskStatus], None]
#: (kind, the subagent's own delegator, task id, its notes) → a session for it.
Opener = Callable[[SubagentKind, "Subagents", str, Note], Awaitable[Session]]


class WatchedApprovals:
    """The turn's approval gate as a subagent uses it: while a person is asked, the task card says the
    task is ``waiting`` (and for what), so nobody wonders why it stands still."""

    def __init__(self, gate: ApprovalGate, note: Note) -> None:
        self.gate = gate
        self.note = note

    async def approve(
        self, command: str, reason: str, *, patterns: Sequence[str] = (), trust: TrustLevel = "member"
    ) -> ApprovalDecision:
        self.note(f"waiting for approval: {short(command, 120)}", "waiting")
        decision = await self.gate.approve(command, reason, patterns=patterns, trust=trust)
        self.note("approved" if decision.approved else "not approved", "running")
        return decision


#: How a task can end; a stored task in one of these is never run again under the same id.
ENDED: frozenset[TaskStatus] = frozenset({"done", "failed", "stopped"})


@dataclass(slots=True)
class Outcome:
    status: TaskStatus
    text: str
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(slots=True)
class _Step:
    kind: str
    text: str
    status: TaskStatus = "running"
    card: bool = True


@dataclass(slots=True)
class _Trail:
    """A task's steps, written to the store and the card in order by one pump, so neither a slow
    database nor a slow chat API holds the subagent up (tool progress arrives through a sync callback)."""

    task_id: str
    thread_id: str
    store: TaskStore | None
    reporter: TaskReporter | None
    number: int
    queue: asyncio.Queue[_Step | None] = field(default_factory=asyncio.Queue)

    def add(self, kind: str, text: str, *, status: TaskStatus = "running", card: bool = True) -> None:
        self.queue.put_nowait(_Step(kind, text, status, card))

    async def pump(self) -> None:
        while (step := await self.queue.get()) is not None:
            if self.store is not None:
                try:
                    await self.store.add_step(
                        task_id=self.task_id,
                        thread_id=self.thread_id,
                        number=self.number,
                        kind=step.kind,
                        text=step.text,
                    )
                except Exception as exc:  # bookkeeping never fails a task
                    log.warning("storing a step of %s failed: %s", self.task_id, type(exc).__name__)
            self.number += 1
            if self.reporter is not None and step.card:
                try:
                    await self.reporter.step(
                        task_id=self.task_id, text=short(step.text, 200), status=step.status
                    )
                except Exception as exc:
                    log.warning("task card step failed: %s", type(exc).__name__)


async def run_tool_calls(
    calls: Sequence[ToolCall], call: Callable[[ToolCall], Coroutine[Any, Any, ToolMessage]]
) -> list[ToolMessage]:
    """Run one model message's tool calls: ``task`` calls all at once, the others one after another in
    their order (a ``write_file`` then ``bash`` pair depends on it); results in the calls' order.

    Cancelling (``/stop``) cancels every call still running and waits for them to end.
    """
    results: dict[int, ToolMessage] = {}
    async with asyncio.TaskGroup() as group:
        started: dict[int, asyncio.Task[ToolMessage]] = {
            i: group.create_task(call(c)) for i, c in enumerate(calls) if c["name"] == "task"
        }
        for i, c in enumerate(calls):
            if i not in started:
                results[i] = await call(c)
    results.update({i: task.result() for i, task in started.items()})
    return [results[i] for i in range(len(calls))]


class Subagents:
    """The ``task`` tool's delegator for one turn (depth 0) or one subagent (depth ≥ 1)."""

    def __init__(
        self,
        config: SubagentsConfig,
        *,
        thread_id: str,
        store: TaskStore | None,
        reporter: TaskReporter | None,
        opener: Opener,
        depth: int = 0,
        parent_task_id: str | None = None,
    ) -> None:
        self.config = config
        self.kinds = kinds_of(config)
        self.thread_id = thread_id
        self.store = store
        self.reporter = reporter
        self.opener = opener
        self.depth = depth
        self.parent_task_id = parent_task_id
        self._slots = asyncio.Semaphore(config.max_concurrent)

    @property
    def may_delegate(self) -> bool:
        return self.depth < self.config.max_depth

    def child(self, task_id: str) -> Subagents:
        """The delegator of the subagent running ``task_id`` (one level deeper, its own slots)."""
        return Subagents(
            self.config,
            thread_id=self.thread_id,
            store=self.store,
            reporter=self.reporter,
            opener=self.opener,
            depth=self.depth + 1,
            parent_task_id=task_id,
        )

    async def delegate(self, *, call_id: str, kind: str, title: str, prompt: str) -> str:
        if not self.may_delegate:
            return DEPTH_REFUSAL.format(depth=self.config.max_depth)
        spec = self.kinds.get(kind or GENERAL_SUBAGENT)
        if spec is None:
            raise SandboxError(f"there is no subagent kind {kind!r}; kinds: {', '.join(self.kinds)}")
        if not prompt.strip():
            raise SandboxError("the task's prompt is empty; write the whole brief into it")
        title = short(title or prompt, 80)
        task_id = task_id_for(self.thread_id, call_id, self.parent_task_id)
        earlier = await self.store.task(task_id) if self.store is not None else None
        if earlier is not None and earlier.status in ENDED and earlier.result is not None:
            # Asked again (a redelivered turn, or the next turn after /stop): how it ended, not a second
            # run. Only a task a crash left running runs again (docs/subagents.md).
            await self._report_finished(task_id, earlier.status, earlier.result)
            return self._for_parent(task_id, spec.name, Outcome(earlier.status, earlier.result))
        number = await self._begin(task_id, call_id, spec.name, title, prompt)
        trail = _Trail(task_id, self.thread_id, self.store, self.reporter, number)
        stop = self.reporter.stop_requested(task_id) if self.reporter is not None else None
        outcome = Outcome("stopped", "stopped: the turn that started it was stopped")
        pump = asyncio.create_task(trail.pump())
        try:
            if self.reporter is not None:
                await _quietly(self.reporter.started(task_id=task_id, title=title, kind=spec.name))
            if await self._take_slot(stop, trail):
                try:
                    trail.add("note", f"started ({spec.name})")
                    await self._set_status(task_id, "running")
                    outcome = await self._run(spec, task_id, prompt, trail)
                finally:
                    self._slots.release()
            else:
                outcome = Outcome("stopped", "stopped: a person stopped this task before it started")
        except Exception as exc:
            log.exception("task %s failed", task_id)
            outcome = Outcome("failed", f"failed: {describe_error(exc)} ({type(exc).__name__})")
        finally:
            # Also when the turn is cancelled (/stop): the record and the card say how it ended.
            await asyncio.shield(self._finish(task_id, outcome, trail, pump))
        return self._for_parent(task_id, spec.name, outcome)

    async def _take_slot(self, stop: asyncio.Event | None, trail: _Trail) -> bool:
        """Wait for a free slot; False (holding none) when the task is stopped while it waits, so Stop
        on a queued task's card ends it at once rather than when a slot frees."""
        if not self._slots.locked():
            await self._slots.acquire()  # free: taken at once, without yielding to another task
            return True
        trail.add(
            "note",
            f"waiting for a free slot ({self.config.max_concurrent} tasks run at once)",
            status="queued",
        )
        if stop is None:
            await self._slots.acquire()
            return True
        if stop.is_set():
            return False
        taking = asyncio.create_task(self._slots.acquire())
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait((taking, stopping), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the turn is stopped while this task waits
            stopping.cancel()
            taking.cancel()
            await asyncio.wait((taking, stopping))
            if not taking.cancelled():
                self._slots.release()
            raise
        stopping.cancel()
        if not taking.done():
            taking.cancel()
        await asyncio.wait((taking, stopping))
        got = not taking.cancelled()
        if got and not stop.is_set():
            return True
        if got:  # the slot came just as the task was stopped: give it back
            self._slots.release()
        return False

    # --- one task ------------------------------------------------------------------------------------
    async def _run(self, spec: SubagentKind, task_id: str, prompt: str, trail: _Trail) -> Outcome:
        session = await self.opener(
            spec, self.child(task_id), task_id, lambda text, status: trail.add("note", text, status=status)
        )
        stop = self.reporter.stop_requested(task_id) if self.reporter is not None else None
        counts = Outcome("running", "")
        talk = self._converse if spec.acp is None else self._acp
        work = asyncio.create_task(talk(session, spec, prompt, trail, counts))
        stopper = asyncio.create_task(stop.wait()) if stop is not None else None
        watched = [t for t in (work, stopper) if t is not None]
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            pass
        finally:
            for t in watched:
                t.cancel()
            await asyncio.wait(watched)
            await asyncio.shield(session.close())  # kills what its commands left running
        if work.done() and not work.cancelled():
            return work.result()
        status: TaskStatus
        if stopper is not None and stopper.done() and not stopper.cancelled():
            status, why = "stopped", "stopped: a person stopped this task"
        else:
            status, why = (
                "failed",
                f"stopped: it ran longer than its time limit of {self.config.timeout_seconds:g} s"
                " (agent.subagents.timeout_seconds)",
            )
        trail.add("note", why, status=status)
        return _ended(counts, status, why)

    async def _converse(
        self, session: Session, spec: SubagentKind, prompt: str, trail: _Trail, counts: Outcome
    ) -> Outcome:
        """The subagent's own tool-calling loop, within its model-call and token limits."""
        messages: list[BaseMessage] = [
            SystemMessage(spec.system_prompt),
            SystemMessage(f"{session.context}\n\n{SUBAGENT_NOTE}"),
            HumanMessage(prompt),
        ]
        while True:
            response = await session.ask(messages)
            counts.model_calls += 1
            usage = response.usage_metadata if isinstance(response, AIMessage) else None
            if usage is not None:
                counts.input_tokens += usage["input_tokens"]
                counts.output_tokens += usage["output_tokens"]
            text = session.mask(str(response.text).strip())
            counts.text = text or counts.text
            calls = response.tool_calls if isinstance(response, AIMessage) else []
            invalid = response.invalid_tool_calls if isinstance(response, AIMessage) else []
            if text:
                trail.add("model", text)
            if calls:
                trail.add("model", "asked for: " + ", ".join(c["name"] for c in calls), card=False)
            if not calls and not invalid:
                return _ended(counts, "done", text or "(the subagent finished without a word)")
            used = counts.input_tokens + counts.output_tokens
            if used > self.config.max_tokens:
                why = (
                    f"stopped: it used {used:,} tokens, over its budget of {self.config.max_tokens:,}"
                    " (agent.subagents.max_tokens)"
                )
                trail.add("note", why, status="failed")
                return _ended(counts, "failed", why)
            if counts.model_calls >= self.config.max_turns:
                why = (
                    f"stopped: it made {counts.model_calls} model calls, its limit"
                    " (agent.subagents.max_turns), before finishing"
                )
                trail.add("note", why, status="failed")
                return _ended(counts, "failed", why)
            messages.append(response)
            messages.extend(await run_tool_calls(calls, lambda c: self._tool(session, c, trail, counts)))
            messages.extend(
                ToolMessage(
                    content=f"Error: the arguments for {bad.get('name')} were not valid JSON.",
                    tool_call_id=bad.get("id") or "",
                    name=bad.get("name") or "unknown",
                    status="error",
                )
                for bad in invalid
            )

    async def _acp(
        self, session: Session, spec: SubagentKind, prompt: str, trail: _Trail, counts: Outcome
    ) -> Outcome:
        """A coding agent over ACP does the job; its permission requests are the chat's approvals."""
        if session.sandbox is None or spec.acp is None:
            raise SandboxError("coding agents over ACP need a sandbox here, and none was lent")
        approvals = session.approvals

        async def approve(what: str, why: str) -> bool:
            if approvals is None:  # nobody to ask (no chat): the agent's request is refused
                trail.add("note", f"not approved (no chat to ask): {short(what, 120)}")
                return False
            decision = await approvals.approve(what, why, trust=session.trust)
            return decision.approved

        # Its env values are secrets whatever their names: masked on the card, in the result and in logs,
        # even where the service's own list of known secrets did not include them.
        own = SecretMasker.of(spec.acp_env)

        def mask(text: str) -> str:
            return own(session.mask(text))

        hooks = Hooks(step=lambda kind, text: trail.add(kind, text), approve=approve, mask=mask)
        result = await run_acp(
            session.sandbox, spec.acp, prompt, hooks, env=spec.acp_env, mounts=spec.acp_mounts
        )
        counts.tool_calls = result.tool_calls
        return Outcome(result.status, result.text, tool_calls=result.tool_calls)

    async def _tool(self, session: Session, call: ToolCall, trail: _Trail, counts: Outcome) -> ToolMessage:
        counts.tool_calls += 1
        name = call["name"]
        if name == "task" and not self._nested_allowed():
            refusal = DEPTH_REFUSAL.format(depth=self.config.max_depth)
            trail.add("tool", "task refused: subagents may not start subagents here")
            return ToolMessage(content=refusal, tool_call_id=call["id"] or "", name=name, status="error")

        def write(event: object) -> None:
            if isinstance(event, ToolStarted):
                trail.add("tool", event.summary or event.name)

        result = await session.call_tool(name, call["args"], call["id"], write)
        trail.add("output", f"{name}: {result.text}", card=False)
        return result

    def _nested_allowed(self) -> bool:
        """Whether the subagents this delegator starts may start their own."""
        return self.depth + 1 < self.config.max_depth

    # --- bookkeeping ---------------------------------------------------------------------------------
    async def _begin(self, task_id: str, call_id: str, kind: str, title: str, prompt: str) -> int:
        if self.store is None:
            return 1
        try:
            return await self.store.begin(
                task_id=task_id,
                thread_id=self.thread_id,
                parent_task_id=self.parent_task_id,
                tool_call_id=call_id,
                kind=kind,
                title=title,
                prompt=prompt,
            )
        except Exception as exc:
            log.warning("recording task %s failed: %s", task_id, type(exc).__name__)
            return 1

    async def _set_status(self, task_id: str, status: TaskStatus) -> None:
        if self.store is None:
            return
        try:
            await self.store.set_status(task_id, status)
        except Exception as exc:
            log.warning("updating task %s failed: %s", task_id, type(exc).__name__)

    async def _finish(self, task_id: str, outcome: Outcome, trail: _Trail, pump: asyncio.Task[None]) -> None:
        trail.add("result", f"{outcome.status}: {outcome.text}", status=outcome.status, card=False)
        trail.queue.put_nowait(None)
        await pump
        if self.store is not None:
            try:
                await self.store.finish(
                    task_id,
                    status=outcome.status,
                    result=outcome.text,
                    input_tokens=outcome.input_tokens,
                    output_tokens=outcome.output_tokens,
                )
            except Exception as exc:
                log.warning("recording the end of task %s failed: %s", task_id, type(exc).__name__)
        await self._report_finished(task_id, outcome.status, outcome.text)

    async def _report_finished(self, task_id: str, status: TaskStatus, text: str) -> None:
        if self.reporter is not None:
            await _quietly(self.reporter.finished(task_id=task_id, status=status, result=text))

    def _for_parent(self, task_id: str, kind: str, outcome: Outcome) -> str:
        """The concise result the starting model gets: how it ended, then the subagent's answer, cut."""
        text = outcome.text.strip()
        limit = self.config.result_chars
        if len(text) > limit:
            text = text[: limit - 1] + "…"
        facts = [kind]
        if outcome.model_calls:
            facts.append(f"{outcome.model_calls} model call(s), {outcome.tool_calls} tool call(s)")
        return f"[task {task_id} {outcome.status}: {', '.join(facts)}]\n{text}"


def _ended(counts: Outcome, status: TaskStatus, text: str) -> Outcome:
    """The outcome with the counts so far; a task that did not finish passes on what it last said."""
    if status != "done" and counts.text:
        text = f"{text}\nWhat it had said last: {counts.text}"
    return Outcome(
        status,
        text,
        counts.model_calls,
        counts.tool_calls,
        counts.input_tokens,
        counts.output_tokens,
    )


async def _quietly(call: Awaitable[None]) -> None:
    """A task card that cannot be shown never fails the task (the reporter should not raise anyway)."""
    try:
        await call
    except Exception as exc:
        log.warning("task card update failed: %s", type(exc).__name__)
