"""Feishu / Lark: the long connection over lark-oapi, messages and CardKit cards.

The channel itself is ``channel.py``; the other modules are its transport, formatting and intake.
"""
