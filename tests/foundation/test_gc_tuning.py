"""Issues 19 and 32: the served app freezes what start-up allocated and what survives young collections,
and still frees garbage cycles among frozen objects when it is idle."""

from __future__ import annotations

import gc

from bot.app import create_app
from bot.gc_tuning import THRESHOLDS, freeze_survivors, untune_gc
from tests.conftest import make_settings
from tests.foundation.instant_agent import InstantAgent


async def test_serving_freezes_start_up_objects_and_raises_gc_thresholds(tmp_path):
    before = gc.get_threshold()
    app = create_app(make_settings(tmp_path), agent=InstantAgent())
    try:
        async with app.router.lifespan_context(app):
            assert gc.get_freeze_count() > 0  # start-up's objects sit in the permanent generation
            assert gc.get_threshold() == THRESHOLDS
            assert freeze_survivors in gc.callbacks  # and what survives a young collection from now on
    finally:
        untune_gc()
        gc.set_threshold(*before)


class Node:
    """A garbage cycle once dropped: what only a collection can free."""

    def __init__(self) -> None:
        self.me = self


def test_survivors_are_frozen_and_an_idle_service_still_frees_their_cycles():
    import weakref

    from bot.gc_tuning import GcKeeper, tune_gc

    before = gc.get_threshold()
    tune_gc()
    try:
        node = Node()
        gone = weakref.ref(node)
        gc.collect(0)  # survives a young collection: frozen, so automatic collections skip it from now on
        del node
        gc.collect(0)
        assert gone() is not None
        busy = GcKeeper(lambda: False, full_at_most_every=0, full_after_young=1)
        assert not busy.step() and gone() is not None  # messages in flight: no full collection
        quiet = GcKeeper(lambda: True, full_at_most_every=0)
        gc.collect(0)
        assert not quiet.step() and gone() is not None  # too little frozen to be worth a full walk yet
        idle = GcKeeper(lambda: True, full_at_most_every=0, full_after_young=1)
        gc.collect(0)  # (a young collection since the keeper started: something was frozen)
        assert idle.step() and gone() is None
        assert gc.get_freeze_count() > 0  # what is left is frozen again
    finally:
        untune_gc()
        gc.set_threshold(*before)


async def test_a_busy_service_gets_young_collections_every_few_milliseconds_that_do_not_count_towards_a_full_one():
    import asyncio

    from bot.gc_tuning import GcKeeper, tune_gc

    before = gc.get_threshold()
    tune_gc()
    try:
        busy = True
        keeper = GcKeeper(lambda: not busy, full_at_most_every=0, full_after_young=1)
        young = gc.get_stats()[0]["collections"]
        task = asyncio.create_task(keeper.run(every=60, young_every=0.01, idle_poll=0.01))
        await asyncio.sleep(0.3)
        assert gc.get_stats()[0]["collections"] - young >= 5  # paced, not waiting for 5,000 net allocations
        busy = False
        await asyncio.sleep(0.05)
        settled = gc.get_stats()[0]["collections"]
        await asyncio.sleep(0.1)
        assert gc.get_stats()[0]["collections"] - settled <= 1  # idle: no more pacing
        task.cancel()
        assert not keeper.step()  # only paced collections since it started: no full walk for them
        assert keeper.full_collections == 0
    finally:
        untune_gc()
        gc.set_threshold(*before)


def test_collection_paused_for_start_up_imports_comes_back_after_the_last_overlapping_block():
    """The service's and the agent's imports pause the collector in two threads at once; a collector
    left off would never free a cycle again, and one that was off before must stay off."""
    import threading

    from bot.gc_tuning import collection_paused

    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other_import() -> None:
        with collection_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_import)
    with collection_paused():
        thread.start()
        assert inside.wait(10)
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's import is still running
    release.set()
    thread.join(10)
    assert gc.isenabled()

    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()  # off before: still off
    finally:
        gc.enable()
