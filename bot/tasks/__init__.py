"""Task cards: one chat message per background job, edited in place from queued to its result.

A background job (a scheduled run, a subagent the agent started, a long tool call) shows in its chat as
one card that moves through queued → running (its current step) → waiting → done / failed / stopped,
with a ⏹ Stop button while it runs. The card is durable (:mod:`bot.tasks.store`): a restart finds the
same card and continues it in place, and its final result is delivered once (docs/tasks.md).
"""
