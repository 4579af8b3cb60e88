"""What the turn runner asks of spending: may this turn start, and what did the finished one cost.

Before a turn: the budgets of its owner, chat, agent and schedule (:mod:`bot.spend.budgets`). A reached
limit stops the turn with one plain sentence; with ``budgets.on_limit: ask_admin`` a person's turn first
waits for an admin's approval on the approvals desk (buttons where the platform has them), which lifts
the limit for the rest of the day. Scheduled and goal turns never wait: nobody is there to be asked.

After a turn: its cost is added to the ledger and the ``switchboard_cost_total`` counter, and whoever
crossed ``warn_at_percent`` of a limit is told once (privately where the platform can: spending is
personal).
"""

from __future__ import annotations

import asyncio
import logging

from agent.events import TurnFinished
from bot import metrics
from bot.approvals import ApprovalDesk
from bot.db import Database
from bot.spend.budgets import BudgetGate, Reached
from bot.spend.ledger import SpendLedger
from bot.spend.prices import MICROS, turn_cost_micros
from bot.spend.scope import SpendKey
from bot.turns import SendNotice, Turn
from channels.types import InboundMessage
from config.schema import ModelPricing, Settings

log = logging.getLogger(__name__)


def currency_of(settings: Settings) -> str:
    """The one currency of the models' prices (the schema refuses two); USD when nothing is priced."""
    return next((m.pricing.currency for m in settings.models if m.pricing is not None), "USD")


class SpendKeeper:
    def __init__(self, settings: Settings, db: Database, notify: SendNotice) -> None:
        self.settings = settings
        self.ledger = SpendLedger(db)
        self.gate = BudgetGate(settings, self.ledger)
        self.notify = notify
        #: Costs being written (see :meth:`after_turn`): referenced here until done, as asyncio asks.
        self._writing: set[asyncio.Task[None]] = set()
        #: Where an over-budget turn asks an admin (``ask_admin``); None: it stops.
        self.approvals: ApprovalDesk | None = None

    @property
    def currency(self) -> str:
        return currency_of(self.settings)

    def pricing(self, model: str) -> ModelPricing | None:
        """The model's prices now (``models`` may change on ``SIGHUP``, bot/reload.py)."""
        return next((m.pricing for m in self.settings.models if m.name == model), None)

    @staticmethod
    def key(turn: Turn) -> SpendKey:
        agent = turn.agent.name if turn.agent is not None and turn.agent.agent is not None else None
        return SpendKey.of(turn.message, turn.identity.owner, agent)

    def _state(self, r: Reached, message: InboundMessage, state: str) -> str:
        """One limit in words. A person's own spending is private: in a group the sentence names them
        and leaves the amounts out (they are in ``/usage`` in a direct message)."""
        if r.scope == "owner" and not message.is_private:
            return f"{r.whose(message.sender.name or 'this person')} {state}"
        return f"{r.whose()} {state} ({r.amounts(self.currency)})"

    def refusal(self, reached: list[Reached], message: InboundMessage, asked: str = "") -> str:
        first = reached[0]
        why = "; ".join(self._state(r, message, "is used up") for r in reached)
        what = "scheduled task" if first.scope == "schedule" else "turn"
        reset = "midnight UTC" if all(r.period == "day" for r in reached) else "the next day or month (UTC)"
        return f"💸 This {what} did not run: {why}.{asked} It resets at {reset}."

    async def over_budget(self, message: InboundMessage, owner: str) -> str | None:
        """Which limits a turn of ``owner`` here would be over, in words (None: none). Asks nobody: for
        work nobody waits on, such as the next step of a goal (bot/goal_runner.py)."""
        if not self.gate.enabled:
            return None
        reached = await self.gate.reached(SpendKey.of(message, owner))
        return "; ".join(self._state(r, message, "is used up") for r in reached) or None

    async def before_turn(self, turn: Turn) -> str | None:
        """None when the turn may run; otherwise the sentence its reply ends with."""
        if not self.gate.enabled:
            return None
        key = self.key(turn)
        reached = await self.gate.reached(key)
        if not reached:
            return None
        desk = self.approvals
        if self.settings.budgets.on_limit != "ask_admin" or desk is None or turn.ask.hidden or key.schedule:
            return self.refusal(reached, turn.message)
        need = "; ".join(self._state(r, turn.message, "is used up") for r in reached)
        decision = await desk.request(
            turn.message,
            turn.conversation.thread_id,
            f"{need}. Approving runs it and raises the limit for the rest of today.",
            "is over budget",
            trust="guest",  # only an admin may approve spending
            subject="turn",
        )
        if not decision.approved:
            return self.refusal(reached, turn.message, " An admin did not approve going over it.")
        await self.gate.raise_for_today(reached, key.owner, by="approvals desk")
        log.info("budget raised for today by an admin: %s", ", ".join(f"{r.scope}" for r in reached))
        return None

    async def after_turn(self, turn: Turn, finished: TurnFinished) -> None:
        """Price and record a finished turn; warn at ``warn_at_percent``. Never fails the turn.

        A turn the provider reported no tokens for (a model server without usage reports, the
        benchmark's instant model) costs nothing and writes nothing: no database write on that path."""
        if not (finished.input_tokens or finished.output_tokens):
            return
        # Written in a task of its own that a /stop does not cut: the model has answered and been paid,
        # so a ⏹ pressed while the cost is written (a busy database) must not let the turn escape the
        # budget, nor mark a warning as given without giving it.
        writing = asyncio.create_task(self._account(turn, finished), name="spend after a turn")
        self._writing.add(writing)
        writing.add_done_callback(self._writing.discard)
        await asyncio.shield(writing)

    async def _account(self, turn: Turn, finished: TurnFinished) -> None:
        """Price and record ``finished``; then the warnings it crossed (marked once, then said)."""
        key = self.key(turn)
        model = finished.model or "default"
        cost = turn_cost_micros(
            self.pricing(model), finished.input_tokens, finished.output_tokens, finished.cached_tokens
        )
        try:
            await self.ledger.record(
                key,
                model,
                input_tokens=finished.input_tokens,
                output_tokens=finished.output_tokens,
                cached_tokens=finished.cached_tokens,
                cost_micros=cost,
            )
        except Exception as exc:
            log.warning("recording a turn's cost failed: %s", type(exc).__name__)
            return
        metrics.COST.inc((key.agent, model), cost / MICROS)
        if not cost or not self.gate.enabled:
            return
        try:
            warned = await self.gate.newly_warned(key)
        except Exception as exc:
            log.warning("checking budget warnings failed: %s", type(exc).__name__)
            return
        for r in warned:
            percent = r.spent * 100 // r.limit  # at least warn_at_percent; more if one turn went past it
            text = f"💸 Heads-up: {percent} % of {self._state(r, turn.message, 'is spent')}."
            try:
                await self.notify(turn.message, text, private=r.scope == "owner")
            except Exception as exc:
                log.info("could not send a budget warning: %s", exc)
