"""The web chat (``/chat``): a browser as a platform. The HTTP side lives in :mod:`bot.webchat`."""
