"""Prices, usage and budgets (docs/budgets.md).

Every finished turn's token counts (the provider's own usage report) are priced with its model's
``models[].pricing`` and added to one row per day, owner, chat, agent, schedule and model
(:mod:`bot.spend.ledger`). Before a turn starts, the limits of ``budgets:`` are compared with those rows
(one indexed read per configured scope, :mod:`bot.spend.budgets`); the turn runner asks
:class:`bot.spend.keeper.SpendKeeper`, the only part it knows.

Money is integer micro-units of the models' currency everywhere it is stored or summed; the Prometheus
counter ``switchboard_cost_total`` is a float mirror for dashboards.
"""
