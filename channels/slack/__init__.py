"""Slack: Socket Mode over slack-bolt, Web API calls over slack-sdk.

The channel itself is ``channel.py``; the other modules are its transport, formatting and intake.
"""
