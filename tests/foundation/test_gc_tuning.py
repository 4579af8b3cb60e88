"""Issue 19: the served app freezes what start-up allocated and raises the collector's thresholds."""

from __future__ import annotations

import gc

from bot.app import create_app
from bot.gc_tuning import THRESHOLDS
from tests.conftest import make_settings
from tests.foundation.test_bursts import InstantAgent


async def test_serving_freezes_start_up_objects_and_raises_gc_thresholds(tmp_path):
    before = gc.get_threshold()
    app = create_app(make_settings(tmp_path), agent=InstantAgent())
    try:
        async with app.router.lifespan_context(app):
            assert gc.get_freeze_count() > 0  # start-up's objects sit in the permanent generation
            assert gc.get_threshold() == THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
