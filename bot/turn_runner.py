"""The turn runner: one turn, from its placeholder to its delivered answer and what comes after.

It opens (or reuses) the turn's reply, shows the placeholder, saves the message's files into the owner's
uploads, builds the agent's request at the turn's trust level, and streams the agent's text and tool
progress into the reply; ``/stop`` keeps what was written and marks it stopped, a failure ends the reply
with one plain sentence and a trace id. Once the answer is delivered it marks the inbox entry done and
runs the after-turn hooks (memory, goals), which may queue a follow-up turn. Which turn runs when is the
lane scheduler's job (:mod:`bot.lanes`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from agent.errors import describe_error
from agent.events import (
    Agent,
    TextDelta,
    TextWithdrawn,
    ToolFinished,
    ToolStarted,
    TrustLevel,
    TurnFinished,
    TurnRequest,
)
from agent.paths import ThreadPaths, safe_filename, unique_path
from bot import metrics, tracing
from bot.agents.directory import AgentDirectory
from bot.approvals import ApprovalDesk, ChatApproval
from bot.bus import MessageBus
from bot.faults import StorageRetry, StorageUnavailable, is_storage_error
from bot.inbox import Inbox
from bot.lanes import open_turn_reply, stoppable
from bot.redelivery import FinalDelivery
from bot.schedule_desk import ScheduleDesk
from bot.schedules import ScheduleBook
from bot.settle import Settler
from bot.spend.keeper import SpendKeeper
from bot.tasks.approval import CardApproval
from bot.tasks.card import CardStream
from bot.tasks.desk import TaskDesk, TurnTasks
from bot.threads import Conversation
from bot.trust import lowest, profile_for
from bot.turns import (
    PLACEHOLDER,
    STOPPED_NOTE,
    AfterTurnHook,
    Lane,
    OnTurnError,
    SubmitTurn,
    Turn,
    TurnAsk,
    TurnError,
    TurnOutcome,
    TurnStage,
    approval_mode,
    live_actions,
)
from channels.base import Channel
from channels.errors import ChannelError, FileTooLarge
from channels.reply import ReplyStream
from channels.types import InboundMessage
from config.schema import Settings

log = logging.getLogger(__name__)

#: The level a message's sender has now (their identity resolved again): see :meth:`TurnRunner._turn_level`.
LevelNow = Callable[[InboundMessage, Channel], Awaitable[TrustLevel]]


class TurnRunner:
    """Runs turns the lane scheduler hands it, at most ``bus.max_concurrent_turns`` at once."""

    def __init__(
        self,
        *,
        settings: Settings,
        agent: Agent,
        bus: MessageBus,
        inbox: Inbox,
        channels: Mapping[str, Channel],
        storage: StorageRetry,
        settler: Settler,
        level_now: LevelNow,
        submit: SubmitTurn,
        schedules: ScheduleBook | None = None,
    ) -> None:
        self.settings = settings
        self.agent = agent
        self.bus = bus
        self.inbox = inbox
        self.channels = channels
        self.storage = storage
        #: A final reply that hits a rate limit or a 5xx is delivered later, from its saved answer.
        self.delivery = FinalDelivery(inbox.save_answer, storage.call, settings.bus.final_retry_seconds)
        self.level_now = level_now
        self.submit_turn = submit
        self.schedules = schedules
        #: Where risky commands wait for ``/approve`` (bot/approvals.py); None: ``sandbox.approval: never``.
        self.approvals: ApprovalDesk | None = None
        #: Prices finished turns and checks budgets before a turn starts (bot/spend/); None: neither.
        self.spend: SpendKeeper | None = None
        #: Named agents (bot/agents/): fits each turn's request to its agent; None: the built-in agent.
        self.agents: AgentDirectory | None = None
        #: Task cards (bot/tasks/): a scheduled run answers with one; each turn's agent may report tasks.
        self.tasks: TaskDesk | None = None
        self.after_turn_hooks: list[AfterTurnHook] = []
        #: Told about every failed turn once, after its log line (see :class:`~bot.turns.TurnError`).
        self.on_turn_error: OnTurnError | None = None
        self.data_dir = Path(settings.data_dir)
        self._turn_slots = asyncio.Semaphore(settings.bus.max_concurrent_turns)
        self._complete = settler.complete
        self._fail = settler.fail

    def model_for(self, conversation: Conversation) -> str:
        names = self.agent.model_names()
        return conversation.model if conversation.model in names else names[0]

    async def run(self, turn: Turn, lane: Lane) -> tuple[str, bool, bool] | None:
        """The turn, retried in place while storage is away, inside its log line and metrics."""
        # The per-turn log line and metrics, and the turn's span (model and tools spans inside it).
        with (
            metrics.observe_turn(self._turn_record(turn)),
            tracing.span("turn", turn.message, under_receive=True),
        ):
            return await self.storage.run_turn(turn, functools.partial(self._run_turn, turn, lane))

    async def _run_turn(self, turn: Turn, lane: Lane) -> tuple[str, bool, bool] | None:
        """Run the turn up to its delivered final reply: ``(text, stopped, failed)``, or None when it
        did not run or its failure is already recorded. :meth:`_finish_turn` does the rest."""
        channel = self.channels[turn.message.provider]
        if turn.ask.before_start is not None and not await self._may_start(turn, channel):
            return None
        reply: ReplyStream | None = None
        try:
            card = await self._card_for(turn)
            async with self._turn_slots:
                reply = turn.reply or open_turn_reply(self.channels, self.inbox, turn)
                await self._show_placeholder(turn, reply)
                files: tuple[Path, ...]
                if turn.reply_text is not None:
                    final, files, stopped, failed = turn.reply_text, (), False, False
                elif (halt := await self._over_budget(turn, lane)) is not None:
                    # Over budget: the turn ends with the sentence, as failed (a goal stops, no memory).
                    final, files, stopped, failed = halt, (), halt == STOPPED_NOTE, halt != STOPPED_NOTE
                    metrics.mark_outcome("stopped" if stopped else "over_budget")
                else:
                    final, files, stopped, failed = await self._stream_agent(turn, lane, reply, channel)
                    metrics.mark_outcome("stopped" if stopped else "failed" if failed else "ok")
                if card is not None:
                    card.outcome = "stopped" if stopped else "failed" if failed else "done"
                if not isinstance(reply, CardStream):  # a placeholder not sent yet never will be
                    reply.answer_ready()
                try:
                    # A rate limit or a 5xx is retried until the answer lands (bot/redelivery.py).
                    with tracing.span("reply", turn.message):
                        await self.delivery.finish(reply, final, files, entry_id=turn.ask.entry_id)
                except Exception as exc:
                    log.warning("delivering the final reply failed: %s", exc)
                    metrics.mark_outcome("delivery_failed")
                    await self._report(turn, "delivery", exc)
                    if turn.ask.entry_id:
                        await self._fail(
                            turn.ask.entry_id,
                            f"reply delivery failed: {exc}",
                            reply_text=final,
                            message=turn.message,
                        )
                    return None
        except asyncio.CancelledError:
            if turn.ask.entry_id:
                self.bus.release(turn.ask.entry_id)  # shutdown: stays pending in the inbox
            raise
        except Exception as exc:
            if is_storage_error(exc):  # not the message's fault: run again once storage is back
                metrics.mark_outcome("storage_unavailable")
                if isinstance(exc, StorageUnavailable):
                    raise
                raise StorageUnavailable(reply) from exc
            log.exception("turn failed outside the agent")
            metrics.mark_outcome("error")
            await self._report(turn, "turn", exc)
            if turn.ask.entry_id:
                shown = reply.ref if reply is not None else (turn.resume.first_ref if turn.resume else None)
                await self._fail(
                    turn.ask.entry_id, f"{type(exc).__name__}: {exc}", message=turn.message, shown=shown
                )
            return None
        return final, stopped, failed

    async def _show_placeholder(self, turn: Turn, reply: ReplyStream) -> None:
        """The placeholder with its Stop button. A fresh reply leaves it to the reply's pump while the
        agent starts (:meth:`~channels.reply.ReplyStream.start_soon`), so an answer that is ready first
        reaches the chat as one message; ``turn.shown`` is set when the reply is visible."""
        reply.on_visible = turn.shown.set
        if not isinstance(reply, CardStream) and reply.start_soon(PLACEHOLDER, live_actions(turn)):
            return
        try:
            await reply.start(PLACEHOLDER, live_actions(turn))
        except ChannelError as exc:
            log.info("placeholder failed; the final reply will be sent fresh: %s", exc)
        turn.shown.set()

    async def _card_for(self, turn: Turn) -> CardStream | None:
        """A scheduled run's task card (bot/tasks/): it becomes the turn's reply."""
        return await self.tasks.open_for_turn(turn) if self.tasks is not None else None

    async def finish_turn(self, turn: Turn, final: str, stopped: bool, failed: bool) -> None:
        """After the reply is delivered and the lane released: mark the entry done, then the hooks.

        In a cluster the thread's claim is held until the hooks have run: a follow-up they start
        takes its own hold first, so the thread never looks free to another instance in between."""
        cluster = self.bus.cluster
        finishing = cluster.hold(turn.message) if cluster is not None else None
        try:
            if turn.ask.entry_id:
                try:
                    await self._complete(turn.ask.entry_id)
                except asyncio.CancelledError:
                    self.bus.release(turn.ask.entry_id)  # shutdown: the delivered turn re-runs at next start
                    raise
            if turn.ask.after_delivery is not None:
                try:
                    await turn.ask.after_delivery(final, stopped, failed)
                except Exception:
                    log.exception("after-delivery callback failed")
            await self._after_turn(turn, final, stopped=stopped, failed=failed)
        finally:
            if finishing is not None:
                self.bus.release(finishing)

    async def _report(self, turn: Turn, stage: TurnStage, exc: BaseException) -> None:
        """Tell the error hook about a failed turn. The hook's own failure is logged and goes no
        further: the turn's reply and inbox entry end exactly as they would without a hook."""
        if self.on_turn_error is None:
            return
        failure = TurnError(
            turn.message, turn.conversation.thread_id, turn.trace_id, stage, exc, turn.ask.hidden
        )
        try:
            await self.on_turn_error(failure)
        except Exception:
            log.exception("the on_turn_error hook failed")

    async def _over_budget(self, turn: Turn, lane: Lane) -> str | None:
        """The budget check (bot/spend/): None to run the turn, else the text its reply ends with. It may
        wait for an admin's approval, so it runs as the lane's stoppable task: ⏹ Stop withdraws the request."""
        if self.agents is not None and turn.agent is None:  # spending counts for the turn's agent
            turn.agent = await self.agents.choose(turn.message, turn.conversation)
        spend = self.spend
        if spend is None or not spend.gate.enabled:
            return None
        refusal: list[str | None] = [None]

        async def check() -> None:
            refusal[0] = await spend.before_turn(turn)

        if await stoppable(lane, check()):
            return STOPPED_NOTE
        return refusal[0]

    async def _may_start(self, turn: Turn, channel: Channel) -> bool:
        """Ask the turn's guard; a refused turn's reply (e.g. its notice) ends with the guard's reason."""
        assert turn.ask.before_start is not None
        try:
            refusal = await turn.ask.before_start()
        except Exception:
            log.exception("a turn's start check failed; not running it")
            refusal = "⚠️ Something went wrong, so I did not run this step."
        if refusal is None:
            return True
        if turn.ask.task is not None:  # its guard showed the refusal on the turn's task card
            return False
        reply = turn.reply or channel.open_reply(turn.message)
        try:
            await reply.finish(refusal)
        except Exception as exc:
            log.info("could not show why a turn did not run: %s", exc)
        return False

    def _turn_record(self, turn: Turn) -> metrics.TurnRecord:
        m = turn.message
        return metrics.TurnRecord(
            trace_id=turn.trace_id,
            provider=m.provider,
            workspace=m.workspace,
            chat=m.chat,
            thread=turn.conversation.thread_id,
            model=self.model_for(turn.conversation),
            hidden=turn.ask.hidden,
            received_at=None if turn.ask.hidden else m.received_at,
        )

    async def _stream_agent(
        self, turn: Turn, lane: Lane, reply: ReplyStream, channel: Channel
    ) -> tuple[str, tuple[Path, ...], bool, bool]:
        parts: list[str] = []
        progress: list[str | None] = [None]
        result: dict[str, object] = {}

        def render() -> str:
            body = "".join(parts)
            if progress[0]:
                return f"{body}\n\n{progress[0]}" if body else progress[0]
            return body or PLACEHOLDER

        text = turn.ask.text
        attachments, notices = await self._store_files(turn, channel)
        if notices:
            progress[0] = " ".join(notices)
        if attachments:
            text = f"{text}\n\n[Files attached: {', '.join(attachments)}]".strip()
        card = reply if isinstance(reply, CardStream) else None
        level = await self._turn_level(turn, channel)
        # A guest's turn may only chat, and its sandbox never gets the channel's secrets.
        profile = profile_for(level)
        request = TurnRequest(
            thread_id=turn.conversation.thread_id,
            owner=turn.identity.owner,
            text=text,
            model=self.model_for(turn.conversation),
            attachments=attachments,
            hidden=turn.ask.hidden,
            system_prompt=turn.ask.system_prompt,
            secrets=await channel.run_secrets(turn.message) if profile.secrets else {},
            sender_name=turn.message.sender.name,
            skill=turn.ask.skill,
            scheduler=(
                ScheduleDesk(self.schedules, turn.message, turn.identity.owner, level)
                if self.schedules and level != "guest"
                else None
            ),
            approvals=(
                ChatApproval(self.approvals, turn.message, turn.conversation.thread_id)
                if self.approvals
                else None
            ),
            approval_mode=approval_mode(turn.conversation.approval),
            trust=level,
            profile=profile,
            # LangSmith/Langfuse run metadata, and the model/tools spans
            metadata=tracing.run_metadata(turn.trace_id, turn.message.provider, turn.conversation.thread_id),
            callbacks=tracing.agent_callbacks(),
            # A job's card (a scheduled run, a goal step) also shows its long tool calls, as steps.
            tasks=(
                self.tasks.reporter(
                    turn.message, owner=turn.identity.owner, thread_id=turn.conversation.thread_id, job=card
                )
                if self.tasks is not None
                else None
            ),
        )
        if self.agents is not None:  # the named agent's prompt, model, tools, policies, room window
            turn.agent = await self.agents.prepare(request, turn.message, turn.conversation, turn.agent)
        if card is not None and request.approvals is not None:  # its card says when it waits for a yes
            request.approvals = CardApproval(request.approvals, card)

        async def consume() -> None:
            async for event in self.agent.run(request):
                metrics.observe_event(event)
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(
                    event, TextWithdrawn
                ):  # a cut-off answer asked for again (agent/stream_end.py)
                    shown = "".join(parts)
                    parts[:] = [shown[: max(0, len(shown) - event.chars)]]
                elif isinstance(event, ToolStarted):
                    step = f"{event.summary or f'running `{event.name}`'}"
                    if card is not None:  # a task card shows the step in its status line
                        await card.step(step)
                    else:
                        progress[0] = f"⏳ {step}…"
                elif isinstance(event, ToolFinished):
                    progress[0] = None
                elif isinstance(event, TurnFinished):
                    result["text"], result["files"] = event.text, event.files
                    progress[0] = None
                    if card is None:  # the final text is known: no placeholder or partial text goes out now
                        reply.answer_ready()
                    if self.spend is not None:
                        await self.spend.after_turn(turn, event)
                reply.update(render())

        try:
            stopped = await stoppable(lane, consume())
        except Exception as exc:
            if is_storage_error(exc):
                raise StorageUnavailable(reply, "".join(parts)) from exc
            log.exception("agent turn failed")
            await self._report(turn, "agent", exc)
            sentence = f"⚠️ {describe_error(exc)} (trace {turn.trace_id})"
            partial = "".join(parts).rstrip()
            return (f"{partial}\n\n{sentence}" if partial else sentence), (), False, True
        if stopped:
            if isinstance(request.tasks, TurnTasks):  # /stop: its tasks' cards must not stay "running"
                await request.tasks.stopped_with_turn()
            partial = "".join(parts).rstrip()
            return (f"{partial}\n\n{STOPPED_NOTE}" if partial else STOPPED_NOTE), (), True, False
        final = str(result.get("text") or "".join(parts))
        if notices:  # e.g. a skipped oversize file: the user must still see it once streaming is over
            final = "\n".join(notices) + "\n\n" + final
        return final, tuple(result.get("files", ())), False, False  # type: ignore[arg-type]

    async def _turn_level(self, turn: Turn, channel: Channel) -> TrustLevel:
        """The level a turn runs at: the one decided when it was asked for; a follow-up (a goal step,
        perhaps resumed after a restart) also never above its creator's level now."""
        if turn.ask.trust is not None and not turn.ask.hidden:
            return turn.ask.trust
        now = await self.level_now(turn.message, channel)
        return now if turn.ask.trust is None else lowest(turn.ask.trust, now)

    async def _store_files(self, turn: Turn, channel: Channel) -> tuple[list[str], list[str]]:
        """Save inbound files into the owner's uploads; return agent-visible paths and user notices."""
        files = turn.message.files
        if not files or turn.reply_text is not None:
            return [], []
        paths = ThreadPaths(self.data_dir, turn.identity.owner, turn.conversation.thread_id)
        await asyncio.to_thread(paths.ensure)
        limit = self.settings.sandbox.max_upload_bytes
        stored: list[str] = []
        notices: list[str] = []
        for file in files:
            try:
                data = await channel.download(file, limit)
            except FileTooLarge as exc:
                notices.append(
                    f"📎 {file.name} is too large ({exc.size // 1024} KiB; limit {exc.limit // 1024} KiB), so I skipped it."
                )
                continue
            except (ChannelError, NotImplementedError) as exc:
                log.warning("downloading %s failed: %s", file.name, exc)
                notices.append(f"📎 I couldn't download {file.name}.")
                continue
            target = await asyncio.to_thread(self._write_upload, paths.uploads, file.name, data)
            stored.append(paths.virtual(target))
        return stored, notices

    @staticmethod
    def _write_upload(directory: Path, name: str, data: bytes) -> Path:
        target = unique_path(directory, safe_filename(name))
        target.write_bytes(data)
        return target

    async def _after_turn(self, turn: Turn, text: str, *, stopped: bool, failed: bool) -> None:
        outcome = TurnOutcome(
            turn.message,
            turn.identity,
            turn.conversation,
            text,
            turn.ask.hidden,
            stopped,
            failed,
            turn.ask.task,
        )
        for hook in self.after_turn_hooks:
            try:
                follow = await hook(outcome)
            except Exception:
                log.exception("after-turn hook failed")
                continue
            if follow is not None:
                await self.submit_turn(
                    turn.message,
                    turn.identity,
                    TurnAsk(
                        text=follow.text,
                        hidden=follow.hidden,
                        system_prompt=follow.system_prompt,
                        notice=follow.notice,
                        before_start=follow.before_start,
                        after_delivery=follow.after_delivery,
                        trust=turn.ask.trust,
                        task=follow.task,
                    ),
                )
