"""Telegram: Bot API over python-telegram-bot (long polling or webhook).

The channel itself is ``channel.py``; the other modules are its transport, formatting and intake.
"""
