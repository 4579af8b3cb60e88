"""GitHub webhooks: verified deliveries, a durable delivery log, agent bindings and replies via githubkit.

Only ``config`` and ``channels`` are imported from here; the bot wires everything in
``bot/features/github.py``.
"""
