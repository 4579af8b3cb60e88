"""``/ready`` and ``/health`` tell the moment the agent is ready, not up to two seconds later.

Both read :meth:`Service.readiness`, whose answers are cached for two seconds (bot/probes.py) so a load
balancer's polling is not load on the database. The agent's answer while it was being built ("agent
starting") used to stay cached after the build finished: a rolling upgrade waited up to two more
seconds for ``/ready``, and ``/health`` meanwhile said ``"unavailable: agent starting"`` and
``"degraded"``. Real service, real agent build; only the model is the fake one.
"""

from __future__ import annotations

from config.schema import Settings
from tests.harness import Harness


async def test_readiness_asked_while_the_agent_starts_says_ready_as_soon_as_it_is(settings: Settings) -> None:
    harness = Harness(settings)
    service = harness.service
    try:
        await service.open()  # storage and channels; the agent is built in the background
        starting = await service.readiness()  # what /ready asked while the agent was being built
        assert starting.database is None
        assert starting.agent == "agent starting"

        await service.agent_ready()
        assert (await service.readiness()).agent is None
        health = await service.health()
        assert health["agent"] == "ready" and health["status"] == "ok"
    finally:
        await harness.stop()
