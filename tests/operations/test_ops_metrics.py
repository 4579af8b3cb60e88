"""``/metrics`` for an operator: build info, process figures, dead letters and the queue, channel state."""

from __future__ import annotations

import platform

from prometheus_client.parser import text_string_to_metric_families

from bot.app import create_app
from bot.version import VERSION
from channels.memory import MemoryChannel
from tests.conftest import make_settings
from tests.foundation.test_poison_messages import BrokenDirectory
from tests.operations.test_observability import sample, serving


async def test_metrics_show_dead_letters_channel_state_and_the_build(tmp_path, llm):
    settings = make_settings(tmp_path, llm, bus={"max_attempts": 1})
    chat = MemoryChannel("memory")
    app = create_app(settings, channels={"memory": chat})
    async with serving(app) as client:
        service = app.state.service
        assert service.manager is not None
        service.manager.identity = BrokenDirectory()
        await chat.deliver(chat.make_message("poison?", message_id="p1"))
        await service.manager.wait_idle()
        text = (await client.get("/metrics")).text

    assert sample(text, "switchboard_inbox_entries", status="dead") == 1
    assert sample(text, "switchboard_inbox_entries", status="pending") == 0
    assert sample(text, "switchboard_channel_state", channel="memory", state="connected") == 1
    assert sample(text, "switchboard_channel_state", channel="memory", state="error") == 0
    assert sample(text, "switchboard_build_info", version=VERSION, python=platform.python_version()) == 1
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"process_start_time_seconds", "process_resident_memory_bytes"} <= names
