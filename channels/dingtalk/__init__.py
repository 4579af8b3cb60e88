"""DingTalk: Stream mode over dingtalk-stream, AI cards and robot messages.

The channel itself is ``channel.py``; the other modules are its transport, formatting and intake.
"""
