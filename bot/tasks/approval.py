"""A task card says "waiting for approval" while its job's risky command waits for a person's answer.

Why a wrapper around the turn's :class:`~agent.events.ApprovalGate` and not a change to the approvals
desk: the desk asks in the chat and knows nothing of cards; the card only needs to know when a wait
begins and ends, which is exactly one call of the gate.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from agent.events import ApprovalDecision, ApprovalGate, TrustLevel
from bot.tasks.card import CardStream

log = logging.getLogger(__name__)
MAX_COMMAND_SHOWN = 120


@dataclass(slots=True)
class CardApproval:
    """The turn's gate, with the card's status set to ``waiting`` for as long as the gate waits."""

    inner: ApprovalGate
    card: CardStream

    async def approve(
        self, command: str, reason: str, *, patterns: Sequence[str] = (), trust: TrustLevel = "member"
    ) -> ApprovalDecision:
        shown = command if len(command) <= MAX_COMMAND_SHOWN else command[: MAX_COMMAND_SHOWN - 1] + "…"
        await self._quietly(self.card.waiting(f"`{shown}`"))
        try:
            return await self.inner.approve(command, reason, patterns=patterns, trust=trust)
        finally:
            await self._quietly(self.card.waited())

    @staticmethod
    async def _quietly(change: Awaitable[None]) -> None:
        try:
            await change
        except Exception as exc:  # the card catches up later; the approval itself must go on
            log.warning("the task card could not show the approval wait: %s", exc)
