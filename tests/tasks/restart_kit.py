"""kill -9 while a task card runs, then start again: the half every card restart test shares.

The restart tests (``test_task_card_restart.py``, ``test_goal_card_restart.py``,
``test_subagent_restart.py``) each start a real ``python -m bot serve`` (bench/reliability_telegram.py's
:class:`ServeProcess`), make a card run, kill the service with SIGKILL while it runs — so nothing of the
card's durability may rely on a clean stop — and start it again until the work is finished. What differs
is what starts the work, what "running" and "finished" look like, and what the chat must show after; that
stays in each test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.reliability_telegram import ServeProcess, wait_for

#: How long a step of a restart test may take: a ``serve`` start plus a streamed answer, on a loaded machine.
STEP_TIMEOUT = 120


def kill_while(config: Path, log: Path, start: Callable[[], None], running: Callable[[], bool]) -> None:
    """Start ``serve``, call ``start`` (the user's message), and SIGKILL the service once ``running``
    holds; fails with the service's log when it never does."""
    service = ServeProcess(config, log)
    try:
        start()
        assert wait_for(running, timeout=STEP_TIMEOUT), log.read_text()[-3000:]
    finally:
        service.kill()


def restart_until(config: Path, log: Path, finished: Callable[[], bool]) -> None:
    """Start ``serve`` again on the same database and stop it gracefully (SIGTERM) once ``finished``
    holds; fails with the service's log when it never does."""
    service = ServeProcess(config, log)
    try:
        assert wait_for(finished, timeout=STEP_TIMEOUT), log.read_text()[-3000:]
    finally:
        service.terminate()
