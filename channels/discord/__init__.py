"""Discord: the gateway over discord.py, interactions and REST calls.

The channel itself is ``channel.py``; the other modules are its transport, formatting and intake.
"""
