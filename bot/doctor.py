"""``switchboard doctor``: check each moving part and say what to fix, one line per check."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.engine import make_url

from agent.models import ModelLoadError, build_chat_model
from bot.db import Database
from bot.registry import channel_class
from config.base import EVERYONE, ChatChannelSection
from config.schema import Settings


async def _check_database(settings: Settings) -> tuple[bool, str]:
    db = Database(settings.database.url)
    try:
        ok = await db.ping()
    finally:
        await db.close()
    if ok:
        return True, f"database: reachable ({db.engine.url.render_as_string(hide_password=True)})"
    return False, "database: cannot connect — check database.url and that the server is running"


async def _check_cluster(settings: Settings) -> tuple[bool, str]:
    """PostgreSQL: the instances sharing this database (live heartbeats), so an operator sees the cluster."""
    from bot.cluster import live_instances

    db = Database(settings.database.url)
    try:
        members = await live_instances(db, settings.cluster.claim_ttl_seconds)
    except Exception:  # no cluster table yet: no instance has started on this database
        members = []
    finally:
        await db.close()
    if not members:
        return True, "cluster: no instance running on this database"
    listed = ", ".join(f"{m['id']} ({m['claims']} claimed)" for m in members)
    return True, f"cluster: {len(members)} instance(s) running: {listed}"


async def _check_model(settings: Settings) -> list[tuple[bool, str]]:
    results = []
    for cfg in settings.models:
        try:
            build_chat_model(cfg)
        except ModelLoadError as exc:
            results.append((False, f"model {cfg.name}: {exc}"))
            continue
        base = cfg.base_url
        if base:
            import httpx

            try:
                async with httpx.AsyncClient(timeout=5) as client:
                    response = await client.get(
                        base.rstrip("/") + "/models", headers={"Authorization": f"Bearer {cfg.api_key}"}
                    )
                if response.status_code in (401, 403):
                    results.append((False, f"model {cfg.name}: {base} rejected the API key"))
                    continue
            except httpx.HTTPError as exc:
                results.append((False, f"model {cfg.name}: cannot reach {base} ({type(exc).__name__})"))
                continue
        results.append((True, f"model {cfg.name}: {cfg.use} ({cfg.model}) configured"))
    return results


async def _check_channel(settings: Settings, provider: str, section: Any) -> tuple[bool, str]:
    try:
        channel = channel_class(provider)(section, settings=settings)
    except Exception as exc:
        return False, f"channel {provider}: cannot be created: {exc}"
    check = getattr(channel, "check", None)
    if check is None:
        return True, f"channel {provider}: configured (no live check available)"
    try:
        problem = await asyncio.wait_for(check(), timeout=15)
    except Exception as exc:
        problem = f"check failed: {type(exc).__name__}: {exc}"
    if problem:
        return False, f"channel {provider}: {problem}"
    return True, f"channel {provider}: credentials accepted"


def _check_trust(provider: str, section: ChatChannelSection) -> tuple[bool, str]:
    """Who is answered here (docs/security.md), and who can approve a pairing code."""
    trust = section.trust
    if EVERYONE in trust.members:
        return True, f"trust {provider}: everyone who reaches the bot is a member (trust.members: ['*'])"
    line = f"trust {provider}: strangers — private chats: {trust.guests}, groups: {trust.group_guests}"
    if trust.guests == "pair" and not section.admins:
        return True, (
            f"{line}; no channels.{provider}.admins, so only `switchboard pair approve {provider} CODE` "
            "approves a pairing code"
        )
    return True, f"{line}; {len(section.admins)} admin(s)"


async def _check_sandbox(settings: Settings) -> tuple[bool, str]:
    if settings.sandbox.mode == "host":
        return True, (
            "sandbox: host — commands run as this service's user, NOT isolated "
            "(sandbox.mode: bwrap isolates them)"
        )
    from agent.sandbox import SandboxUnavailable
    from agent.sandbox_bwrap import check_bwrap

    try:
        report = await check_bwrap(settings.sandbox)
    except SandboxUnavailable as exc:
        return False, f"sandbox: {exc}"
    network = "internet through the egress proxy" if settings.sandbox.network else "without network"
    seccomp = "seccomp filter on" if report["seccomp"] else "NO seccomp filter (unknown architecture)"
    userns = "new user namespaces blocked" if report["userns"] == "blocked" else "new user namespaces ALLOWED"
    memory = (
        f"memory limited per command ({report['memory']})"
        if report["memory"] != "per process only"
        else "memory limited per process only (no writable cgroup; see docs/sandbox.md)"
    )
    return True, (
        f"sandbox: bwrap — each command isolated, {network}; {seccomp}, {userns}, {memory}, "
        f"disk quota {report['disk_quota_mb']} MB per conversation"
    )


async def _check_mcp(settings: Settings) -> list[tuple[bool, str]]:
    """Start each MCP server as the service would, list its tools, and stop it again."""
    from agent.mcp_tools import McpHub

    hub = McpHub(settings.mcp_servers, settings.sandbox)
    try:
        await hub.start()
        return [
            (state.startswith("ok"), f"mcp server {name}: {state}") for name, state in hub.status().items()
        ]
    finally:
        await hub.close()


async def run_doctor(settings: Settings) -> int:
    checks: list[tuple[bool, str]] = [(True, "config: valid")]
    checks.append(await _check_database(settings))
    if checks[-1][0] and make_url(settings.database.url).get_backend_name() != "sqlite":
        checks.append(await _check_cluster(settings))
    checks.append(await _check_sandbox(settings))
    if settings.mcp_servers:
        checks.extend(await _check_mcp(settings))
    checks.extend(await _check_model(settings))
    enabled = [(p, s) for p, s in settings.channels.items() if s.enabled]
    if not enabled:
        checks.append((True, "channels: none enabled (try `switchboard chat`, or enable one in config.yaml)"))
    for provider, section in enabled:
        checks.append(await _check_channel(settings, provider, section))
        if isinstance(section, ChatChannelSection):
            checks.append(_check_trust(provider, section))
    for ok, line in checks:
        print(f"{'✓' if ok else '✗'} {line}")
    failed = sum(1 for ok, _ in checks if not ok)
    print(f"{len(checks) - failed} ok, {failed} to fix")
    return 1 if failed else 0
