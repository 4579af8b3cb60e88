"""``/admin``'s HTML, script and stylesheet, served from package data (no build step).

The page holds no data; everything it shows comes from ``/api/admin/...`` with the caller's token (kept
in ``sessionStorage`` in jwt mode, like ``/connect``), under the same strict headers
(:class:`connections.web.StaticPage`): scripts and styles from this origin only, no inline code, no framing.
"""

from __future__ import annotations

from connections.web import StaticPage

ADMIN = StaticPage("bot.console", "admin.html", "/admin", ("admin.js", "admin.css"))
