"""The person-facing operations on schedules — add, list, cancel — bound to one chat and one person.

Both ``/schedule`` and the agent's schedule tools (``schedule_task`` …) go through a desk, so a schedule
made by the model ("remind me every Monday at 9") is exactly the one ``/schedule`` would have made:
same parsing, limits, sentences and owner. Every answer is a sentence for the chat; nothing raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from agent.events import TrustLevel
from bot.schedule_spec import ScheduleError, parse_schedule
from bot.schedules import Schedule, ScheduleBook, TooManySchedules, conversation_label
from channels.types import InboundMessage

COMMAND_REFUSED = (
    "Not scheduled: a scheduled task is sent to me later as a plain message and never runs a command, "
    "so it cannot start with / or !. Say in words what should happen then."
)


#: Leading mentions (``@bot``, ``<@U123>``), with what people put after them.
_MENTIONS = re.compile(r"^(?:\s*(?:<@[^>]+>|@[\w.\-]+)[\s:,]*)+")


def looks_like_command(text: str) -> bool:
    """``/x``, ``@bot /x`` or ``!x``: what would read as a command if a person typed it."""
    stripped = _MENTIONS.sub("", text.strip(), count=1).lstrip()
    return stripped.startswith(("/", "!", "／"))


def local_time(moment: float | None, tz: str) -> str:
    if moment is None:
        return "no further runs"
    return datetime.fromtimestamp(moment, ZoneInfo(tz)).strftime("%a %-d %b %H:%M")


def describe(schedule: Schedule) -> str:
    return f"{schedule.id} · {schedule.when} · next {local_time(schedule.next_at, schedule.timezone)} · {schedule.what}"


@dataclass(frozen=True, slots=True)
class ScheduleDesk:
    book: ScheduleBook
    message: InboundMessage
    owner: str
    #: The creator's trust level now: stored with the schedule, its occurrences never run above it.
    trust: TrustLevel = "member"

    @property
    def label(self) -> str:
        return conversation_label(self.message)

    async def add(self, when_and_what: str) -> str:
        """``every weekday 09:00 post the link`` → the confirmation, or why it was not scheduled."""
        book = self.book
        try:
            spec = parse_schedule(when_and_what, now=book.clock(), tz=book.timezone)
        except ScheduleError as exc:
            return str(exc)
        if looks_like_command(spec.what):
            return COMMAND_REFUSED
        try:
            created = await book.store.create(
                self.message, self.owner, spec, tz=book.timezone, now=book.clock(), trust=self.trust
            )
        except TooManySchedules as exc:
            return f"Not scheduled: {exc}."
        book.scheduler.poke()
        return (
            f"⏰ Scheduled {created.id}: {created.when} — next {local_time(created.next_at, created.timezone)} "
            f"({created.timezone}). /schedule cancel {created.id} to stop it."
        )

    async def listing(self) -> str:
        found = await self.book.store.for_conversation(self.label)
        if not found:
            return "No scheduled tasks in this chat. Add one with /schedule <when> <what>."
        return "⏰ Scheduled here:\n" + "\n".join(describe(s) for s in found)

    async def cancel(self, schedule_id: str) -> str:
        schedule_id = schedule_id.strip().lower()
        if not schedule_id:
            return "Say which one: /schedule cancel ID (see /schedule list)."
        mine = [s for s in await self.book.store.for_conversation(self.label) if s.id == schedule_id]
        if mine and mine[0].owner != self.owner:
            return f"Only the person who set up {schedule_id} can cancel it."
        if mine and await self.book.store.cancel(self.label, schedule_id, self.book.clock()):
            return f"⏹ Cancelled {schedule_id}."
        return f"There is no scheduled task {schedule_id} in this chat."
