"""Assembly: what runs, in which order, and what each part is given.

Read top to bottom, :meth:`Service.__init__` lists every part and :meth:`Service.start` starts them in
two stages. :meth:`Service.open` brings up what takes input and needs no agent:

    database schema → WAL maintenance → inbox writer → cluster → channels built (and, in a cluster,
    those receiving exclusively put under a lease) → agent build begins (background) → features
    (connections, GitHub and Telegram webhooks, schedules) → resume unfinished → retry poll →
    retention (background) → channels started → leases kept

and :meth:`Service.run_agent`, once the agent exists, what answers:

    agent → manager (identity chain, /connect store) → agent hooks → manager starts

Importing LangGraph/LangChain and building the agent takes about a second; ``serve`` answers HTTP and
stores arriving messages in the inbox meanwhile, and the manager takes them once the agent is ready.
``switchboard chat`` and the tests await both stages (:meth:`Service.start`).

:meth:`Service.stop` reverses it: leases stop changing hands here, channels pause (no new input), the
leases are released (another instance receives now), the manager drains running turns, channels stop,
features stop in reverse, then the inbox writer, the agent, and last the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from sqlalchemy import MetaData

from agent.events import Agent
from bot import approvals as approvals_module
from bot import cluster as cluster_module
from bot import inbox as inbox_module
from bot import migrations
from bot import pairing as pairing_module
from bot import threads as threads_module
from bot.approvals import ApprovalDesk
from bot.bounded import NoAnswer, within
from bot.bus import MessageBus
from bot.cluster import Cluster
from bot.commands import CommandRegistry
from bot.db import Database
from bot.diskcheck import disk_check
from bot.features import Feature, Foundation, Running
from bot.features.agent import AgentFeature
from bot.features.agents import AgentsFeature
from bot.features.connections import ConnectionsFeature
from bot.features.github import GitHubFeature
from bot.features.schedules import SchedulesFeature
from bot.features.telegram import TelegramWebhookFeature
from bot.gc_tuning import collection_paused
from bot.identity import IdentityChain
from bot.inbox import Inbox
from bot.leases import LeaseKeeper
from bot.manager import ChannelManager
from bot.probes import CachedProbe
from bot.registry import channel_class
from bot.retention import Retention
from bot.router import ROUTE_CONNECTIONS
from bot.spend import tables as spend_tables
from bot.spend.keeper import SpendKeeper
from bot.tasks import store as tasks_store
from bot.thread_retention import AbandonedThreads, ThreadEraser
from bot.threads import ThreadStore
from bot.version import VERSION
from bot.webchat.identity import WebIdentity
from channels.base import Channel
from channels.types import ChatCommand
from config.schema import Settings

if TYPE_CHECKING:
    from agent.runtime import AgentRuntime  # LangGraph: imported by the agent build, in a worker thread

log = logging.getLogger(__name__)

AgentState = Literal["starting", "ready", "failed"]
#: ``new`` until :meth:`Service.open`; ``running`` from then (also while it fails part-way) until
#: :meth:`Service.stop`; ``stopped`` for good — a stopped service is not started again.
Lifecycle = Literal["new", "running", "stopped"]


class Readiness(NamedTuple):
    """What the health checks found (bot/probes.py): None where a component passed its check."""

    database: str | None
    agent: str | None
    disk: str | None


CHANNEL_CALL_TIMEOUT_SECONDS = 10
#: /health's database checks wait this long, then report the database unreachable.
HEALTH_DB_SECONDS = 2.0


def _import_agent_runtime() -> type[AgentRuntime]:
    """LangGraph and LangChain: most of start-up's import time, so it runs in a worker thread."""
    with collection_paused():
        from agent.runtime import AgentRuntime

    return AgentRuntime


class Service:
    def __init__(
        self,
        settings: Settings,
        *,
        channels: dict[str, Channel] | None = None,
        agent: Agent | None = None,
        chat_models: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        # Storage: one database, the durable inbox in front of the bus, the conversation → thread map.
        # A connection for every running turn plus some for routing and background work; routing waits
        # on its own bound (bot/router.py) and creates new conversations in batches, so a burst of new
        # chats queues in the process instead of timing out in the pool.
        pool = settings.bus.max_concurrent_turns + ROUTE_CONNECTIONS
        self.db = Database(settings.database.url, pool_size=pool)
        self.inbox = Inbox(self.db, max_attempts=settings.bus.max_attempts)
        # PostgreSQL: any instance runs any message, claimed in the database (docs/scale-out.md).
        self.cluster = None if self.db.is_sqlite else Cluster(self.db, settings)
        # In a cluster, Telegram long polling and the Discord gateway receive on one instance only.
        self.leases = (
            None
            if self.cluster is None
            else LeaseKeeper(self.db, self.cluster.instance_id, settings.cluster.lease_ttl_seconds)
        )
        self.bus = MessageBus(
            self.inbox,
            settings.bus.queue_size,
            cluster=self.cluster,
            max_claims=settings.bus.max_concurrent_turns + settings.cluster.claim_ahead,
        )
        self.threads = ThreadStore(self.db)
        base = Foundation(settings=settings, db=self.db, threads=self.threads)
        # The chat commands, known before the manager so channels can list them when they connect.
        self.commands = CommandRegistry.discover()
        # Features that take input without the agent, in the order they start (reverse: stop).
        self.connections = ConnectionsFeature(
            base, live_providers=lambda: list(self.channels), handle=self._channel_handle
        )
        self.github = GitHubFeature(base)
        self.schedules = SchedulesFeature(base, publish=self.bus.publish, clock=clock)
        self.telegram = TelegramWebhookFeature(base)  # webhook mode's route → the Telegram channel
        self.agents = AgentsFeature(base)  # named agents and bindings (bot/agents/)
        self.features: list[Feature] = [
            self.connections,
            self.github,
            self.telegram,
            self.schedules,
            self.agents,
        ]
        # The agent's memory and goals, wired into the manager once the agent is ready.
        self.agent_feature = AgentFeature()
        # Finished inbox entries and GitHub deliveries older than database.retention_days are deleted,
        # and threads no conversation uses any more (after /new) once idle that long.
        self.eraser = ThreadEraser(self.db, Path(settings.data_dir), self._forget_histories)
        abandoned = AbandonedThreads(self.eraser)
        self.retention = Retention(
            settings.database.retention_days,
            [self.inbox, self.github.store, abandoned, tasks_store.TaskStore(self.db)],
        )
        # Who owns a message: GitHub agents own their threads; everyone else per their connection.
        self.identity = IdentityChain([self.github.identity, WebIdentity(), self.connections.identity])

        self._given_channels = channels
        self._given_agent = agent
        self._chat_models = chat_models
        self.channels: dict[str, Channel] = {}
        self.agent: Agent | None = None
        self.agent_state: AgentState = "starting"
        self.manager: ChannelManager | None = None
        self.lifecycle: Lifecycle = "new"
        self.started_at: float | None = None
        self._agent_start: asyncio.Task[None] | None = None
        self._retry_poll: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.channel_errors: dict[str, str] = {}
        # What /health, /ready and the component metric say: real round trips, cached for 2 s.
        self.database_probe = CachedProbe("database", self.db.problem)
        self.agent_probe = CachedProbe("agent", self._agent_problem)
        # A full disk: reads (and so SELECT 1) still work; only a write tells (bot/diskcheck.py).
        self.disk_probe = CachedProbe("disk", disk_check(self.data_dir, self.db.sqlite_path).problem)

    @property
    def data_dir(self) -> Path:
        return Path(self.settings.data_dir)

    def tables(self) -> list[MetaData]:
        metadatas = [
            inbox_module.metadata,
            threads_module.metadata,
            approvals_module.metadata,
            spend_tables.metadata,
            pairing_module.metadata,
            tasks_store.metadata,
            migrations.metadata,
        ]
        if self.cluster is not None:
            metadatas.append(cluster_module.metadata)
        metadatas.extend(self.agent_feature.tables())
        for feature in self.features:
            metadatas.extend(feature.tables())
        return metadatas

    def checkpoint_path(self) -> Path | None:
        """SQLite keeps agent checkpoints in a file beside the main database (separate write lock)."""
        return self.db.checkpoint_path

    async def _forget_histories(self, thread_ids: list[str]) -> None:
        """The agent's stored history of these threads (checkpoints), deleted where it is kept."""
        from agent.thread_history import delete_histories

        await delete_histories(self.settings.database.url, self.db.checkpoint_path, thread_ids)

    def _channel_handle(self, provider: str) -> str | None:
        """The bot's name on ``provider`` as its running channel learnt it (the connect page's deep link)."""
        channel = self.channels.get(provider)
        return channel.handle() if channel is not None else None

    def build_channels(self) -> dict[str, Channel]:
        sections = dict(self.settings.channels.items())
        if self._given_channels is not None:
            built = dict(self._given_channels)
        else:
            built = {}
            for provider, section in sections.items():
                if not section.enabled:
                    continue
                try:
                    built[provider] = channel_class(provider)(section, settings=self.settings)
                except Exception as exc:
                    log.error("channel %s could not be created: %s", provider, exc)
                    self.channel_errors[provider] = str(exc)
        for provider, channel in built.items():  # who approves risky commands there (bot/approvals.py)
            configured = sections.get(provider)
            if configured is not None and channel.approvers is None:
                channel.approvers = configured.approvers
        return built

    async def start(self) -> None:
        """Both stages: return once the agent answers (``switchboard chat``, tests, benchmarks)."""
        await self.open()
        await self.agent_ready()

    async def __aenter__(self) -> Service:
        """``async with Service(settings) as service:`` starts both stages and stops on the way out.

        A start that fails part-way stops what it had started (the database lock, channels, features)
        before the error is raised, as python-telegram-bot's ``Application`` does: the caller's block
        never runs, so nothing else would."""
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    async def open(self) -> None:
        """Storage, channels and the input features, while the agent is built in the background.

        Everything a channel or webhook delivers from here on is stored in the inbox and queued on the
        bus — behind what a previous run left unfinished, so each chat keeps its order — and waits there
        until :meth:`_start_agent` starts the manager.

        Once per service: a second start raises ``RuntimeError`` and changes nothing.
        """
        if self.lifecycle != "new":
            raise RuntimeError(
                "this Switchboard service is already running"
                if self.lifecycle == "running"
                else "this Switchboard service has stopped; build a new Service to run again"
            )
        self.lifecycle = "running"  # before the first await: a concurrent second start is refused too
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db.claim_instance()  # SQLite: one instance per database file (PostgreSQL: any number)
        await self.db.create_schema(self.tables())
        self.db.start_maintenance()
        await self.inbox.start()
        if self.cluster is not None:
            await self.cluster.start()
        self.channels = self.build_channels()  # before the agent's imports begin: SDK imports stay here
        if self.leases is not None:
            self.leases.govern(self.channels)
        self._agent_start = asyncio.create_task(self._start_agent(), name="agent-start")
        running = Running(channels=self.channels)
        for feature in self.features:
            await feature.start(running)
        await self.bus.resume_unfinished()
        self._retry_poll = asyncio.create_task(self._poll_retries(), name="inbox-retries")
        self.retention.start()
        started = {p for p, channel in self.channels.items() if await self._start_channel(p, channel)}
        if self.leases is not None:
            assert self.cluster is not None
            self.cluster.on_lease_freed = self.leases.wake  # a released lease is taken at once
            await self.leases.start(started)
        self.started_at = time.time()

    async def agent_ready(self) -> None:
        """Wait until the manager answers; raises what building the agent raised."""
        if self._agent_start is None:
            raise RuntimeError("Service.open() has not run")
        await asyncio.shield(self._agent_start)

    async def _start_agent(self) -> None:
        """Agent → manager → the agent's memory and goal hooks → the manager takes queued messages."""
        try:
            self.agent = await self._build_agent()
        except BaseException as exc:
            self.agent_state = "failed"
            self.agent_probe.forget()
            if not isinstance(exc, asyncio.CancelledError):
                log.error("the agent could not be started: %s: %s", type(exc).__name__, exc, exc_info=exc)
            raise
        self.manager = ChannelManager(
            settings=self.settings,
            bus=self.bus,
            inbox=self.inbox,
            threads=self.threads,
            agent=self.agent,
            channels=self.channels,
            commands=self.commands,
            identity=self.identity,
            connections=self.connections.store,
            schedules=self.schedules.book,
            pairing=pairing_module.PairingStore(self.db),
            eraser=self.eraser,
        )
        if self.settings.sandbox.approval != "never":  # risky commands wait for /approve in their chat
            self.manager.approvals = ApprovalDesk(
                self.db,
                self.manager.send_notice,
                timeout=self.settings.sandbox.approval_timeout_seconds,
                channels=self.channels,
                runs_elsewhere=self.cluster.runs_elsewhere if self.cluster is not None else None,
            )
        # Cost per turn and budgets (bot/spend/); over budget, a turn asks on the approvals desk.
        self.manager.spend = SpendKeeper(self.settings, self.db, self.manager.send_notice)
        self.manager.spend.approvals = self.manager.approvals
        self.manager.storage.probe = self.storage_problem
        self.agents.attach(self.manager)
        await self.agent_feature.start(self.agent, self.manager)
        await self.manager.start()
        if self.manager.approvals is not None:  # nothing approved for a previous process runs now
            await self.manager.approvals.expire_leftovers()
        self.agent_state = "ready"
        self.agent_probe.forget()  # its cached "agent starting" no longer holds: /ready says so now
        log.info("agent ready: answering messages")

    async def _build_agent(self) -> Agent:
        if self._given_agent is not None:
            return self._given_agent
        runtime_class = await asyncio.to_thread(_import_agent_runtime)
        runtime = runtime_class(
            self.settings,
            checkpoint_path=self.checkpoint_path(),
            chat_models=self._chat_models,
            engine=self.db.engine,
        )
        try:
            await runtime.start()
        except BaseException:
            await runtime.close()  # what started before the failure (sandbox, MCP servers, checkpoints)
            raise
        return runtime

    async def _poll_retries(self) -> None:
        """Pick up ``switchboard inbox retry ID`` requests (the CLI only marks the row in the database)."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.settings.bus.retry_poll_seconds)
                return
            try:
                await self.bus.resume_retries()
            except Exception as exc:  # a busy or briefly unreachable database: the next poll does it
                log.warning("checking for inbox retries failed: %s", exc)

    async def _start_channel(self, provider: str, channel: Channel) -> bool:
        channel.status.set("starting")
        # Platforms with a command menu list what the manager answers.
        channel.offer_commands([ChatCommand(c.name, c.help) for c in self.commands.commands])
        try:
            await channel.start(self.bus.publish)
        except Exception as exc:
            # One broken platform must not take the others down; /health and doctor show it.
            log.error("channel %s failed to start: %s", provider, exc)
            channel.status.set("error", str(exc))
            return False
        return True

    async def stop(self, grace: float | None = None) -> None:
        """Pause input, drain running turns for ``grace`` seconds, then stop everything. Once: a second
        stop (an explicit one inside ``async with``) does nothing."""
        if self.lifecycle == "stopped":
            return
        self.lifecycle = "stopped"
        # 1. pause: no new input; 2. drain: running turns finish and can still reply; 3. stop: disconnect.
        if self.leases is not None:
            self.leases.halt()
        await self._each_channel("pause")
        if self.leases is not None:  # paused (stored updates confirmed): the next instance may take over
            await self.leases.stop()
        self._stopping.set()
        if self._agent_start is not None and not self._agent_start.done():
            self._agent_start.cancel()  # still building: what was queued stays in the inbox for next time
        if self._agent_start is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._agent_start  # a build failure was logged and is raised by agent_ready()
        if self._retry_poll is not None:
            await self._retry_poll  # stopped between polls, so a claimed retry is never lost mid-way
            self._retry_poll = None
        await self.retention.stop()  # between chunks: no delete is cut off
        if self.manager is not None:
            await self.manager.stop(grace)
        else:
            self.bus.close()
        await self._each_channel("stop")
        if self.cluster is not None:  # after the drain: what is left is handed to the other instances
            await self.bus.finish_claiming()
            await self.cluster.stop()
        for feature in reversed(self.features):
            try:
                await feature.stop()
            except Exception:
                log.exception("feature %s did not stop cleanly", feature.name)
        await self.inbox.close()
        if self.agent is not None:
            await self.agent.close()
        await self.db.close()  # last: it awaits the WAL maintenance task before closing connections

    async def _each_channel(self, method: str) -> None:
        for provider, channel in self.channels.items():
            call = channel.pause if method == "pause" else channel.stop
            try:
                await asyncio.wait_for(call(), timeout=CHANNEL_CALL_TIMEOUT_SECONDS)
            except Exception as exc:
                log.warning("channel %s did not %s cleanly: %s", provider, method, exc)

    async def _agent_problem(self) -> str | None:
        """The agent's own check (its checkpoint store answers), once it is running."""
        if self.agent is None or self.agent_state != "ready":
            return f"agent {self.agent_state}"
        return await self.agent.storage_problem()

    async def storage_problem(self) -> str | None:
        """The database's or the agent's checkpoint store's problem, if any (cached ≤ 2 s): a turn
        waiting for storage (bot/faults.py) runs again as soon as this clears."""
        found = await self.readiness()
        return found.database or found.agent or (f"disk {found.disk}" if found.disk else None)

    async def readiness(self) -> Readiness:
        """The database's, the agent's and the disk's problem: None each when it passed its check
        (cached ≤ 2 s). All at once: while PostgreSQL is away each may take up to its timeout."""
        database, agent, disk = await asyncio.gather(
            self.database_probe.problem(), self.agent_probe.problem(), self.disk_probe.problem()
        )
        return Readiness(database, agent, disk)

    def agent_health(self, problem: str | None) -> str:
        """``/health``'s agent entry: its start-up state, or ``unavailable: …`` once it cannot work."""
        if self.agent_state != "ready" or problem is None:
            return self.agent_state
        return f"unavailable: {problem}"

    async def health(self) -> dict[str, Any]:
        db_problem, agent_problem, disk_problem = await self.readiness()
        channels = {name: channel.health() for name, channel in self.channels.items()}
        for name, error in self.channel_errors.items():
            channels.setdefault(name, {"state": "error", "detail": error})
        agent = self.agent_health(agent_problem)
        degraded = (
            db_problem is not None
            or disk_problem is not None
            or self.agent_state == "failed"
            or agent.startswith("unavailable")
            or any(c["state"] == "error" for c in channels.values())
        )
        return {
            "status": "degraded" if degraded else "ok",
            "version": VERSION,
            "database": db_problem or "ok",
            "disk": disk_problem or "ok",
            "agent": agent,
            "sandbox": self.settings.sandbox.mode,
            "sandbox_limits": self.agent.sandbox_limits() if self.agent is not None else {},
            "mcp": self.agent.mcp_status() if self.agent is not None else {},
            "channels": channels,
            "inbox": {"unfinished": self.bus.load},
            **({"cluster": await self._cluster_health()} if self.cluster is not None else {}),
        }

    async def _cluster_health(self) -> dict[str, Any]:
        assert self.cluster is not None and self.leases is not None
        try:
            members = await within(self.cluster.health(), HEALTH_DB_SECONDS)
        except NoAnswer:
            members = {
                "instance": self.cluster.instance_id,
                "claims": len(self.cluster.held),
                "instances": f"unavailable: no answer within {HEALTH_DB_SECONDS:g} s",
            }
        return {**members, "leases": self.leases.held()}
