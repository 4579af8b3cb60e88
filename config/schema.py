"""The settings schema: every key of the configuration contract in ARCHITECTURE.md.

Defaults are the embedded, single-instance set-up (SQLite under ``./data``, no auth, no channels), so
``switchboard serve`` with no config file starts something useful on a laptop.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from config.agents import AgentBinding, NamedAgent, agent_problems
from config.base import ChannelSection, Section, from_env
from config.channels.dingtalk import DingTalkConfig
from config.channels.discord import DiscordConfig
from config.channels.feishu import FeishuConfig
from config.channels.github import GitHubConfig
from config.channels.slack import SlackConfig
from config.channels.telegram import TelegramConfig
from config.channels.web import WebChatConfig
from config.dburl import database_url_problem
from config.speech import SpeechConfig

DEFAULT_JWT_SECRETS = frozenset({"", "changethis", "change-me", "changeme", "secret"})


#: Listening on these, the server is reached as ``localhost`` from this machine.
_LOCAL_HOSTS = frozenset({"", "127.0.0.1", "::1", "localhost", "0.0.0.0", "::"})


def local_public_url(host: object, port: object) -> str:
    """``server.public_url`` when the file leaves it empty: where this machine reaches the server."""
    name = str(host).strip()
    name = "localhost" if name in _LOCAL_HOSTS else (f"[{name}]" if ":" in name else name)
    return f"http://{name}:{port}"


class ServerConfig(Section):
    #: With ``auth.mode: none`` only a loopback address is accepted (``serve`` refuses anything else).
    host: str = "127.0.0.1"
    port: int = Field(8001, ge=0, le=65535)
    #: Where people and platforms reach this server; with ``auth.mode: none`` its host is, besides the
    #: loopback names, the one ``Host`` the API accepts. Empty: ``http://<host>:<port>`` (``localhost``
    #: for a loopback or wildcard host), so changing the port does not leave a stale link behind.
    public_url: str = ""
    #: ``/metrics`` without a bearer token in ``auth.mode: jwt`` (say, a scraper on a private network).
    metrics_public: bool = False

    @model_validator(mode="before")
    @classmethod
    def _public_url_from_host_and_port(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("public_url"):
            fields = cls.model_fields
            host = data.get("host", fields["host"].default)
            port = data.get("port", fields["port"].default)
            data = {**data, "public_url": local_public_url(host, port)}
        return data


class DatabaseConfig(Section):
    url: str = "sqlite+aiosqlite:///./data/switchboard.db"

    @field_validator("url")
    @classmethod
    def _a_url_we_run(cls, value: str) -> str:
        problem = database_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    #: Finished inbox entries and GitHub deliveries older than this are deleted (bot/retention.py);
    #: 0 keeps them forever. At least a day, so a platform's redelivery still finds its duplicate.
    retention_days: float = 30

    @field_validator("retention_days")
    @classmethod
    def _retention_floor(cls, value: float) -> float:
        if value != 0 and value < 1:
            raise ValueError(
                "database.retention_days must be 0 (keep everything) or at least 1: platforms redeliver "
                "for up to a day (Telegram) or three (GitHub), and a deleted message no longer deduplicates"
            )
        return value


class AuthConfig(Section):
    mode: Literal["none", "jwt"] = "none"
    jwt_secret: str | None = from_env("SWITCHBOARD_JWT_SECRET")

    @model_validator(mode="after")
    def _refuse_weak_secret(self) -> AuthConfig:
        if self.mode == "jwt" and (self.jwt_secret or "").strip().lower() in DEFAULT_JWT_SECRETS:
            raise ValueError("auth.mode is jwt but auth.jwt_secret is empty or a well-known default")
        if self.mode == "jwt" and len(self.jwt_secret or "") < 16:
            raise ValueError("auth.jwt_secret must be at least 16 characters")
        return self


class ModelPricing(Section):
    """What a model costs, per million tokens (docs/budgets.md). Prices are exact decimals, never floats."""

    input: Decimal = Field(Decimal(0), ge=0)
    output: Decimal = Field(Decimal(0), ge=0)
    #: Prompt tokens the provider served from its cache (OpenAI's ``cached_tokens``); they are part of the
    #: input count and are charged at this price instead of ``input``.
    cached: Decimal = Field(Decimal(0), ge=0)
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$")


class ModelConfig(Section):
    """One chat model. ``use`` is ``module:Class``; every other key is passed to that class."""

    model_config = Section.model_config | {"extra": "allow"}

    name: str
    use: str = "agent.chat_completions:ChatCompletions"
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    base_url: str | None = None
    supports_vision: bool = False
    supports_thinking: bool = False
    #: How many tokens the model accepts per request (prompt + answer); threads are fitted into it.
    context_tokens: int = Field(128_000, ge=1024)
    #: Prices for cost per turn, ``/usage`` and budgets; None: turns of this model cost nothing.
    pricing: ModelPricing | None = None


class SandboxLimits(Section):
    """Resource limits, so a runaway command cannot hurt the service or other people's commands."""

    cpu_seconds: int = Field(600, gt=0)
    #: Address space of each process (``ulimit -v``).
    memory_mb: int = Field(4096, gt=0)
    #: Everything one command starts, together (a cgroup per command, where the service can make one;
    #: also the size of the command's private ``/tmp`` and ``/var/tmp``, which live in memory).
    memory_total_mb: int = Field(4096, gt=0)
    processes: int = Field(256, gt=0)
    file_size_mb: int = Field(1024, gt=0)
    #: The thread's writable files (workspace/ and outputs/) together.
    disk_mb: int = Field(2048, gt=0)


def parse_host_rule(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port``, a bare IPv6 address or ``*.domain``: (host, port or None)."""
    text = entry.strip().lower()
    if "/" in text or "@" in text:
        raise ValueError(f"{entry!r}: expected host, host:port or *.domain, not a URL")
    host, port = text, ""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r}: expected [IPv6 address]:port")
        port = rest[1:]
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    if not host or any(c.isspace() for c in host) or "*" in host.removeprefix("*."):
        raise ValueError(f"{entry!r}: expected host, host:port or *.domain")
    if port and (not port.isdigit() or not 0 < int(port) < 65536):
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return host, int(port) if port else None


class EgressConfig(Section):
    """What the sandbox's egress proxy lets through besides public internet addresses (docs/sandbox.md)."""

    #: Reachable even though they resolve to this machine or a private network: ``host`` or ``host:port``
    #: (an intranet mirror, ``127.0.0.1:3141`` for a local package cache), ``*.domain`` for subdomains.
    allow_hosts: list[str] = Field(default_factory=list)
    #: Refused even though they are public (matched against the name asked for and its addresses).
    deny_hosts: list[str] = Field(default_factory=list)

    @field_validator("allow_hosts", "deny_hosts")
    @classmethod
    def _rules_parse(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            parse_host_rule(entry)
        return entries


class SandboxConfig(Section):
    """Where the agent's ``bash`` runs. ``bwrap`` isolates; ``host`` runs as the service (opt-in only)."""

    mode: Literal["bwrap", "host"] = "bwrap"
    #: Internet egress through the service's proxy (the sandbox never shares the host's network);
    #: false: no proxy, nothing reachable at all.
    network: bool = True
    egress: EgressConfig = Field(default_factory=EgressConfig)
    #: When the service runs as root, each thread's commands run as its own host uid (and gid) in
    #: ``[uid_base, uid_base + uid_count)``, so one thread's processes never count against another's.
    uid_base: int = Field(1_800_000_000, ge=1000, le=4_000_000_000)
    uid_count: int = Field(100_000, ge=1, le=200_000_000)
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    command_timeout_seconds: float = Field(600, gt=0)
    #: ``bwrap``: a thread's sandbox stays up between its commands (much cheaper than one per command)
    #: and closes after this long without a command.
    idle_seconds: float = Field(300, gt=0, le=86_400)
    #: ``bwrap``: at most this many idle sandboxes are kept (each is a few MB); the longest idle closes.
    max_idle: int = Field(32, ge=0, le=10_000)
    max_output_chars: int = Field(20_000, gt=0)
    max_upload_bytes: int = Field(50 * 1024 * 1024, gt=0)
    #: Which ``bash`` commands wait for a person's approval in chat: none, the risky ones, or all.
    approval: Literal["never", "risky", "always"] = "risky"
    #: How long a command waits for Approve/Deny before it is refused (and the model is told).
    approval_timeout_seconds: float = Field(300, gt=0, le=86_400)
    #: Extra regular expressions (Python syntax, searched case-insensitively in the whole command line)
    #: that make a command risky, on top of the built-in judgement (``agent/risk/``: the command
    #: is parsed and each program judged). They cannot make a command less risky or lift the blocklist.
    risky_patterns: list[str] = Field(default_factory=list)

    @field_validator("risky_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from None
        return patterns


class WebConfig(Section):
    """The ``web_fetch`` tool: on by default, refusing private and loopback addresses (SSRF guard)."""

    fetch: bool = True
    allow_private: bool = False
    #: Host names fetched even though they resolve to private addresses (an intranet wiki, say).
    allow_hosts: list[str] = Field(default_factory=list)
    max_bytes: int = Field(2_000_000, gt=0)
    timeout_seconds: float = Field(20, gt=0)
    user_agent: str = "Switchboard/0.1 (web_fetch)"
    #: A SearXNG instance (its base URL) for the ``web_search`` tool; None = no web_search.
    search_url: str | None = None
    search_results: int = Field(8, gt=0, le=50)


class McpServerConfig(Section):
    """One MCP server: a local command spoken to over stdio, or a Streamable HTTP URL."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: stdio servers run in a bubblewrap sandbox of their own (when sandbox.mode is bwrap).
    isolate: bool = True
    #: Host paths the isolated server may read (its code, its interpreter), bound read-only.
    mounts: list[str] = Field(default_factory=list)
    network: bool = True
    timeout_seconds: float = Field(60, gt=0)
    start_timeout_seconds: float = Field(30, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"mcp server {self.name}: give exactly one of command (stdio) or url (HTTP)")
        return self


class SchedulesConfig(Section):
    """``/schedule``: what happens to runs that fell due while the service was down."""

    missed: Literal["run_once", "skip"] = "run_once"


class MemoryConfig(Section):
    enabled: bool = True
    debounce_seconds: float = Field(30, ge=0)
    max_facts: int = Field(100, gt=0, le=10_000)
    injection_token_budget: int = Field(800, gt=0)


class ConnectionsConfig(Section):
    require_bound_identity: bool = False
    code_ttl_seconds: int = Field(600, gt=0)
    #: The brake on guessing: this many failed /connect attempts per sender and per chat, per window.
    max_failed_attempts: int = Field(5, gt=0)
    failed_attempts_window_seconds: int = Field(600, gt=0)


#: The subagent kind every configuration has (docs/subagents.md).
GENERAL_SUBAGENT = "general"
#: The kinds of task cards other than a subagent's own profile name (bot/tasks/card.py labels them):
#: a profile may not take one, or its card would read and behave as that kind (a ``tool`` card inside
#: a scheduled run is a step of the run's card, docs/tasks.md).
TASK_CARD_KINDS = frozenset({"schedule", "subagent", "goal", "tool"})
_SUBAGENT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Where a sandbox has its own files: a mount there would hide or replace them.
_SANDBOX_OWN = ("/mnt/user-data", "/mnt/skills", "/proc", "/dev", "/etc")


class AcpAgentConfig(Section):
    """A coding-agent CLI the ``task`` tool runs in the thread's sandbox over ACP (docs/subagents.md)."""

    #: The agent's command line, run in the sandbox (e.g. ``[claude-code-acp]``).
    command: list[str] = Field(min_length=1)
    #: Environment for the agent process alone (never the thread's ``bash``), e.g. its API key as
    #: ``${ANTHROPIC_API_KEY}``; every value is treated as a secret and masked wherever it would show.
    env: dict[str, str] = Field(default_factory=dict)
    #: Host paths bound read-only into the agent's sandbox (bwrap mode), e.g. a Node install under /opt.
    mounts: list[str] = Field(default_factory=list)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = sorted(name for name in value if not _ENV_NAME.match(name))
        if bad:
            raise ValueError(f"acp.env names must be environment variable names: {', '.join(bad)}")
        return value

    @field_validator("mounts")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/") or ".." in path.split("/") or path.rstrip("/") == "":
                raise ValueError(f"acp.mounts: {path!r} must be an absolute path (not /, no ..)")
            if any(path == top or path.startswith(top + "/") for top in _SANDBOX_OWN):
                raise ValueError(f"acp.mounts: {path!r} is the sandbox's own ({', '.join(_SANDBOX_OWN)})")
        return [path.rstrip("/") for path in value]


class SubagentProfileConfig(Section):
    """One kind of subagent the ``task`` tool may start besides ``general`` (docs/subagents.md)."""

    name: str
    #: One line the model reads to choose this kind.
    description: str
    #: The subagent's own system prompt (its whole brief comes from the ``task`` call); unused by ``acp``.
    system_prompt: str = ""
    #: A name from ``models``; None: the model of the turn that started it.
    model: str | None = None
    #: Built-in or MCP tools it may use (never more than the starting turn may); None: the same as that turn.
    tools: list[str] | None = None
    #: Run a coding-agent CLI over ACP instead of a model of ours (then model and tools do not apply).
    acp: AcpAgentConfig | None = None

    @model_validator(mode="after")
    def _model_or_acp(self) -> SubagentProfileConfig:
        if self.acp is None and not self.system_prompt.strip():
            raise ValueError(f"subagent {self.name!r} needs a system_prompt (or an acp command)")
        if self.acp is not None and (self.model is not None or self.tools is not None):
            raise ValueError(
                f"subagent {self.name!r} runs a coding agent over acp: model and tools do not apply to it"
            )
        return self

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _SUBAGENT_NAME.match(value) or value == GENERAL_SUBAGENT:
            raise ValueError(
                f"subagent name {value!r} must be lower-case letters, digits, - or _ (at most 32, starting"
                f" with a letter) and not {GENERAL_SUBAGENT!r}, which is built in"
            )
        if value in TASK_CARD_KINDS:
            raise ValueError(
                f"subagent name {value!r} is taken: it is a kind of task card"
                f" ({', '.join(sorted(TASK_CARD_KINDS))}); choose another"
            )
        return value


class SubagentsConfig(Section):
    """The ``task`` tool: a turn delegates self-contained jobs to subagents (docs/subagents.md)."""

    #: Off by default: every task costs model calls of its own.
    enabled: bool = False
    #: Tasks of one turn (or one subagent) running at once; more wait for a free slot.
    max_concurrent: int = Field(3, ge=1, le=32)
    #: How deep delegation goes: 1 lets a turn start subagents but a subagent never starts its own.
    max_depth: int = Field(1, ge=1, le=4)
    #: Model calls one subagent may make before it has to stop.
    max_turns: int = Field(12, ge=1)
    #: Wall-clock limit of one subagent, from the moment it gets a slot.
    timeout_seconds: float = Field(300, gt=0)
    #: Input + output tokens one subagent may use (its model calls together).
    max_tokens: int = Field(200_000, ge=1)
    #: The result the starting model gets is cut to this many characters.
    result_chars: int = Field(4000, ge=200)
    profiles: list[SubagentProfileConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_profiles(self) -> SubagentsConfig:
        names = [p.name for p in self.profiles]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"agent.subagents.profiles: the name(s) {', '.join(twice)} are used twice")
        return self


class AgentConfig(Section):
    """Runtime knobs that are not per model."""

    system_prompt: str = (
        "You are Switchboard, a helpful assistant working inside a team chat. Answer concisely."
    )
    recursion_limit: int = Field(50, gt=0)
    max_goal_continuations: int = Field(8, ge=0)
    #: A thread's history (messages + running summary) above this many estimated tokens is compacted even
    #: when the model's window is larger, so a long thread's turns stay as cheap as its first ones. 0: only
    #: the model's ``context_tokens`` limits it.
    compact_history_tokens: int = Field(8_000, ge=0)
    #: IANA zone name for the date/time line in the system prompt (e.g. Europe/Berlin).
    timezone: str = "UTC"
    #: A tool call (``bash``, an MCP tool, any tool) still running after this many seconds gets a task card
    #: in its chat, with ⏹ Stop for that call alone; inside a job that has a card (a scheduled run, a goal's
    #: step) it is a step of that card instead (docs/tasks.md). 0: never.
    long_tool_seconds: float = Field(10, ge=0)
    subagents: SubagentsConfig = Field(default_factory=SubagentsConfig)

    @model_validator(mode="after")
    def _known_timezone(self) -> AgentConfig:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"agent.timezone {self.timezone!r} is not a known IANA time zone name") from None
        return self


class BusConfig(Section):
    """In-process bus sizing: the queue bound is the back-pressure point."""

    queue_size: int = Field(1000, gt=0)
    max_concurrent_turns: int = Field(32, gt=0)
    drain_seconds: float = Field(10, ge=0)
    #: Failed runs of one message before it is dead-lettered (set aside for ``switchboard inbox``).
    max_attempts: int = Field(3, ge=1)
    #: How often the service looks for messages an operator queued with ``switchboard inbox retry``.
    retry_poll_seconds: float = Field(2, gt=0)
    #: A final reply the platform rate-limits or fails with a 5xx is tried again after this pause,
    #: doubling each time up to a minute (a platform's own ``retry_after`` is honoured when longer).
    final_retry_seconds: float = Field(1.0, gt=0, le=60)


class TracingConfig(Section):
    """OpenTelemetry span export (docs/operations.md#tracing); needs the ``[otel]`` extra when set."""

    #: OTLP/HTTP collector base URL (``/v1/traces`` is appended); None: export only if the standard
    #: ``OTEL_EXPORTER_OTLP_ENDPOINT`` variable is set, else spans are not exported.
    otlp_endpoint: str | None = None
    #: The ``service.name`` resource attribute the spans carry.
    service_name: str = "switchboard"


class ClusterConfig(Section):
    """Several instances on one PostgreSQL database (docs/scale-out.md); ignored with SQLite."""

    #: This instance's name in claims, ``/health`` and ``switchboard doctor``; empty: host-pid-random.
    instance_id: str = ""
    #: A claim (a running turn) not renewed for this long is taken over by another instance.
    claim_ttl_seconds: float = Field(30, gt=0, le=30)
    #: The slow fallback look for work when no NOTIFY arrives (takeovers of lapsed claims ride on it).
    poll_seconds: float = Field(5, gt=0)
    #: Entries an instance claims beyond ``bus.max_concurrent_turns`` (they route while turns run);
    #: 0 spreads turns strictly by free turn slots.
    claim_ahead: int = Field(64, ge=0)
    #: A platform connection held by one instance (Telegram long polling, the Discord gateway) moves to
    #: another instance this long after its holder stopped renewing the lease (renewed every third).
    #: At least 1.5 s: a Telegram long poll is cut to whole seconds that end before the lease does (less
    #: a fifth of it), and a shorter lease would leave no whole second to poll.
    lease_ttl_seconds: float = Field(15, ge=1.5, le=30)


class ChannelsConfig(Section):
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    feishu: FeishuConfig = Field(default_factory=FeishuConfig)
    dingtalk: DingTalkConfig = Field(default_factory=DingTalkConfig)
    github: GitHubConfig = Field(default_factory=GitHubConfig)
    web: WebChatConfig = Field(default_factory=WebChatConfig)

    def items(self) -> list[tuple[str, ChannelSection]]:
        return [(name, getattr(self, name)) for name in type(self).model_fields]


class BudgetLimits(Section):
    """Most that may be spent per UTC day and per UTC month, in the models' currency; None: no limit."""

    day: Decimal | None = Field(None, ge=0)
    month: Decimal | None = Field(None, ge=0)


class BudgetsConfig(Section):
    """Spending limits, checked before every turn (docs/budgets.md). Each limit applies to every owner,
    chat, agent or schedule separately."""

    per_owner: BudgetLimits = Field(default_factory=BudgetLimits)
    per_chat: BudgetLimits = Field(default_factory=BudgetLimits)
    per_agent: BudgetLimits = Field(default_factory=BudgetLimits)
    per_schedule: BudgetLimits = Field(default_factory=BudgetLimits)
    #: The person is told once per day (month) when this share of a limit is spent.
    warn_at_percent: int = Field(80, gt=0, lt=100)
    #: At a limit: ``stop`` the turn with a sentence, or ``ask_admin`` (a person's turn waits for an
    #: admin's approval through the approvals desk, which lifts that limit for the rest of the day).
    on_limit: Literal["stop", "ask_admin"] = "ask_admin"


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite ``database.url`` (None: another database, or in memory)."""
    _, sep, rest = url.partition(":///")
    if not url.startswith("sqlite") or not sep or not rest or rest.startswith(":memory:"):
        return None
    return Path(rest.split("?", 1)[0])


def overlaps(mount: Path, private: list[tuple[str, Path]]) -> str | None:
    """Why binding ``mount`` would show one of the ``private`` paths (inside it, or it inside them)."""
    real = mount.resolve()
    for name, path in private:
        other = path.resolve()
        if real == other or other.is_relative_to(real) or real.is_relative_to(other):
            return f"would show the service's {name} ({path}) to the agent"
    return None


def _default_models() -> list[ModelConfig]:
    return [ModelConfig(name="default", api_key="$OPENAI_API_KEY")]


class Settings(Section):
    server: ServerConfig = Field(default_factory=ServerConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    data_dir: str = "./data"
    #: Folders with SKILL.md the agent can use (read-only at /mnt/skills); ignored if it does not exist.
    skills_dir: str = "./skills"
    auth: AuthConfig = Field(default_factory=AuthConfig)
    models: list[ModelConfig] = Field(default_factory=_default_models, min_length=1)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    schedules: SchedulesConfig = Field(default_factory=SchedulesConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    connections: ConnectionsConfig = Field(default_factory=ConnectionsConfig)
    bus: BusConfig = Field(default_factory=BusConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    speech: SpeechConfig = Field(default_factory=SpeechConfig)
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)
    #: Named agents (docs/agents.md); empty: the one built-in agent answers everywhere.
    agents: list[NamedAgent] = Field(default_factory=list)
    #: Which agent answers where, most specific first (docs/agents.md).
    bindings: list[AgentBinding] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_model_names(self) -> Settings:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"model names must be unique; repeated: {', '.join(dupes)}")
        servers = [s.name for s in self.mcp_servers]
        repeated = sorted({n for n in servers if servers.count(n) > 1})
        if repeated:
            raise ValueError(f"mcp server names must be unique; repeated: {', '.join(repeated)}")
        currencies = sorted({m.pricing.currency for m in self.models if m.pricing is not None})
        if len(currencies) > 1:  # budgets and sums are in one currency
            raise ValueError(f"models[].pricing must use one currency; found {', '.join(currencies)}")
        problems = agent_problems(
            self.agents,
            self.bindings,
            models=set(names),
            mcp_servers=set(servers),
            github_agents={a.name: a.agent for a in self.channels.github.agents},
        )
        if problems:  # each starts with its place; the loader shows one a line (and a single one alone)
            raise ValueError("\n".join(problems) + ("\n" if len(problems) == 1 else ""))
        return self

    @model_validator(mode="after")
    def _subagent_models_exist(self) -> Settings:
        names = [m.name for m in self.models]
        for profile in self.agent.subagents.profiles:
            if profile.model is not None and profile.model not in names:
                raise ValueError(
                    f"agent.subagents.profiles: {profile.name} names the model {profile.model!r}, which is not"
                    f" in models ({', '.join(names)})"
                )
        return self

    @model_validator(mode="after")
    def _acp_mounts_are_safe(self) -> Settings:
        """An agent's mounts exist and never show it the service's own data, database or skills."""
        private = [("data_dir", Path(self.data_dir))]
        sqlite = sqlite_file(self.database.url)
        if sqlite is not None:
            private.append(("database", sqlite))
        for profile in self.agent.subagents.profiles:
            for mount in profile.acp.mounts if profile.acp is not None else []:
                where = f"agent.subagents.profiles: {profile.name}: acp.mounts: {mount}"
                if not Path(mount).exists():
                    raise ValueError(f"{where} does not exist")
                if problem := overlaps(Path(mount), private):
                    raise ValueError(f"{where} {problem}")
        return self

    def model_named(self, name: str | None) -> ModelConfig:
        """The named model, or the first one (the default) when ``name`` is None."""
        if name is None:
            return self.models[0]
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)
