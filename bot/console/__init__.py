"""The operator console: ``/admin`` (a static page) over ``/api/admin/...`` (JSON), admins only.

It lives in :mod:`bot` because it acts on the running service (its channels, the manager's turns, the
inbox); the page itself knows nothing but the JSON API, which is also what scripts and the CLI use.
"""

from bot.console.api import build_router

__all__ = ["build_router"]
