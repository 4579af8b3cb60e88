"""Benchmark: signed GitHub deliveries against ``switchboard serve`` on loopback.

It starts the real server (subprocess, temporary SQLite database, GitHub channel enabled with a webhook
secret and one agent bound to the payloads' repository), then POSTs N signed ``issue_comment.created``
deliveries with C in flight and reports deliveries/s and time-to-acknowledge percentiles. Every
acknowledged delivery is on disk (the delivery log is written before the answer); the script checks
the row count at the end.

Scenarios (``--scenario``):

* ``nomatch`` (default): comments that do not mention the agent. The server verifies the HMAC, stores
  the delivery, evaluates the bindings and answers — the ack path GitHub waits on, without agent work.
* ``fire``: comments that mention the agent, so each delivery also goes into the durable inbox and a turn
  starts (model and GitHub API point at unreachable local ports, so turns fail fast in the background).
  This shows the ack path while the service is busy with the fan-out.

``--bare`` also starts a bare FastAPI app (one ``POST /api/webhooks/github`` route that reads the body
and answers ``{"ok": true}``) in its own uvicorn process and sends it the same bodies and headers, in
alternating rounds, then prints the ingest ratio: switchboard's deliveries/s over the bare route's.

Run:  python -m bench.webhooks --deliveries 2000 --concurrency 32
      python -m bench.webhooks --deliveries 2000 --concurrency 16 --bare --rounds 3
Goal on the shared 2-core CI machines: ≥ 500 deliveries/s, p99 ≤ 50 ms; ingest ≥ 0.8× the bare route.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import httpx
import yaml

from webhooks.signature import sign

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = ROOT / "tests" / "github" / "payloads" / "issue_comment.created.json"
SECRET = "bench-webhook-secret-0123456789"

BARE_APP = """
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

app = FastAPI()


@app.post("/api/webhooks/github")
async def bare(request: Request) -> JSONResponse:
    await request.body()
    return JSONResponse({{"ok": True}})


uvicorn.run(app, host="127.0.0.1", port={port}, log_config=None, access_log=False)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(directory: Path, port: int, queue_size: int) -> Path:
    dead = f"http://127.0.0.1:{free_port()}"
    config = {
        "server": {"host": "127.0.0.1", "port": port, "public_url": f"http://127.0.0.1:{port}"},
        "database": {"url": f"sqlite+aiosqlite:///{directory / 'bench.db'}"},
        "data_dir": str(directory / "data"),
        "models": [{"name": "default", "model": "none", "api_key": "sk-bench", "base_url": f"{dead}/v1"}],
        "memory": {"enabled": False},
        "bus": {"queue_size": queue_size},
        "channels": {
            "github": {
                "enabled": True,
                "webhook_secret": SECRET,
                "api_base_url": dead,
                "agents": [
                    {
                        "name": "bench",
                        "bot_login": "bench-bot",
                        "bindings": [{"repo": "Codertocat/Hello-World"}],
                    }
                ],
            }
        },
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


_COMMENT_IDS = itertools.count(1)


def build_requests(count: int, scenario: str) -> list[tuple[bytes, dict[str, str]]]:
    """Bodies and headers prepared up front so the client spends its time sending, not signing."""
    template = json.loads(PAYLOAD.read_text())
    template["installation"] = {"id": 1}
    prepared = []
    for index in range(count):
        data = dict(template)
        body_text = f"{'@bench-bot ' if scenario == 'fire' else ''}comment {index}"
        # Every comment a new one, as on GitHub (the same comment again would be a replay).
        data["comment"] = {**template["comment"], "body": body_text, "id": next(_COMMENT_IDS)}
        data["issue"] = {**template["issue"], "number": index % 500 + 1}
        body = json.dumps(data).encode()
        headers = {
            "X-GitHub-Event": "issue_comment",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(SECRET, body),
            "Content-Type": "application/json",
        }
        prepared.append((body, headers))
    return prepared


async def wait_healthy(base: str, process: subprocess.Popen[bytes], limit: float = 120) -> None:
    """Until ``/health`` answers and says the agent is built: ``serve`` answers HTTP first and imports
    the agent stack in a thread, which would otherwise share the CPU with the first timed round."""
    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(base_url=base, trust_env=False) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError("switchboard serve exited during start-up")
            try:
                health = await client.get("/health")
                body = health.json()
                # "starting": answered before the service opened (bot/boot.py); the agent is built
                # in the background after that, and the bench times a service that is all there.
                if (
                    health.status_code in (200, 503)
                    and body.get("status") != "starting"
                    and body.get("agent") in (None, "ready")
                ):
                    return
            except (httpx.TransportError, ValueError):
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("switchboard serve did not become healthy in time")


async def send_all(
    base: str, prepared: list[tuple[bytes, dict[str, str]]], concurrency: int
) -> tuple[float, list[float], dict[int, int]]:
    """POST everything with ``concurrency`` requests in flight over keep-alive connections.

    The client is aiohttp (already a dependency) rather than httpx: on a 2-core machine the load
    generator competes with the server, and aiohttp costs several times less CPU per request.
    """
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    pending = iter(prepared)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(base, connector=connector, trust_env=False) as session:

        async def worker() -> None:
            for body, headers in pending:
                started = time.perf_counter()
                async with session.post("/api/webhooks/github", data=body, headers=headers) as response:
                    await response.read()
                latencies.append(time.perf_counter() - started)
                statuses[response.status] = statuses.get(response.status, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return elapsed, latencies, statuses


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux /proc), to tell server cost from a busy machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> int:
    if args.bare:
        return await run_versus_bare(args)
    with tempfile.TemporaryDirectory(prefix="switchboard-bench-") as tmp:
        directory = Path(tmp)
        port = free_port()
        config = write_config(directory, port, queue_size=max(1000, args.deliveries * 2))
        env = server_env(args)
        log = (directory / "serve.log").open("wb")
        process = subprocess.Popen(  # noqa: ASYNC220 - started once, before timing
            [sys.executable, "-m", "bot", "--log-level", "WARNING", "serve", "--config", str(config)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            await wait_healthy(base, process)
            await send_all(base, build_requests(args.warmup, args.scenario), args.concurrency)
            prepared = build_requests(args.deliveries, args.scenario)
            server_cpu = _cpu_seconds(process.pid)
            client_cpu = time.process_time()
            elapsed, latencies, statuses = await send_all(base, prepared, args.concurrency)
            server_cpu = _cpu_seconds(process.pid) - server_cpu
            client_cpu = time.process_time() - client_cpu
        except BaseException:
            log.flush()
            print("server log (tail):\n" + (directory / "serve.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            stop(process)
            log.close()
        with sqlite3.connect(directory / "bench.db") as db:
            stored = db.execute("SELECT count(*) FROM github_deliveries").fetchone()[0]
    rate = len(latencies) / elapsed
    p50, p99 = percentile(latencies, 0.50) * 1000, percentile(latencies, 0.99) * 1000
    print(
        f"scenario            {args.scenario}{' (server PYTHONPATH + ' + args.extra_path + ')' if args.extra_path else ''}"
    )
    print(f"deliveries          {len(latencies)} (+{args.warmup} warm-up), concurrency {args.concurrency}")
    print(f"statuses            {dict(sorted(statuses.items()))}")
    print(f"throughput          {rate:.0f} deliveries/s")
    print(
        f"time to ack         p50 {p50:.1f} ms   p90 {percentile(latencies, 0.90) * 1000:.1f} ms   "
        f"p99 {p99:.1f} ms   max {max(latencies) * 1000:.1f} ms   mean {statistics.mean(latencies) * 1000:.1f} ms"
    )
    print(
        f"CPU per delivery    server {server_cpu / len(latencies) * 1000:.2f} ms, "
        f"client {client_cpu / len(latencies) * 1000:.2f} ms"
    )
    print(f"stored in SQLite    {stored} rows (expected {len(latencies) + args.warmup})")
    print(
        f"machine             {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (client and server share it)"
    )
    goal = rate >= 500 and p99 <= 50
    print(f"goal (≥500/s, p99≤50ms): {'met' if goal else 'NOT met'}")
    return 0 if statuses.get(200) == len(latencies) else 1


def server_env(args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    if args.extra_path:  # e.g. a directory holding uvloop, to measure uvicorn[standard] in isolation
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.extra_path, env.get("PYTHONPATH")]))
    return env


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


async def run_versus_bare(args: argparse.Namespace) -> int:
    """Switchboard's webhook route against a bare FastAPI route: same bodies, same client, alternating."""
    with tempfile.TemporaryDirectory(prefix="switchboard-bench-") as tmp:
        directory = Path(tmp)
        port, bare_port = free_port(), free_port()
        total = args.warmup + args.deliveries * args.rounds
        config = write_config(directory, port, queue_size=max(1000, total * 2))
        env = server_env(args)
        log = (directory / "serve.log").open("wb")
        serve = subprocess.Popen(  # noqa: ASYNC220 - started once, before timing
            [sys.executable, "-m", "bot", "--log-level", "WARNING", "serve", "--config", str(config)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        bare = subprocess.Popen(  # noqa: ASYNC220 - started once, before timing
            [sys.executable, "-c", BARE_APP.format(port=bare_port)], cwd=ROOT, env=env, stdout=log, stderr=log
        )
        base, bare_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{bare_port}"
        rates: dict[str, list[float]] = {"switchboard": [], "bare": []}
        cpu: dict[str, list[float]] = {"switchboard": [], "bare": []}
        try:
            await wait_healthy(base, serve)
            await wait_listening(bare_base, bare)
            for target in (base, bare_base):
                await send_all(target, build_requests(args.warmup, args.scenario), args.concurrency)
            for round_index in range(args.rounds):
                for name, target, process in (("switchboard", base, serve), ("bare", bare_base, bare)):
                    prepared = build_requests(args.deliveries, args.scenario)
                    before = _cpu_seconds(process.pid)
                    elapsed, latencies, statuses = await send_all(target, prepared, args.concurrency)
                    if statuses.get(200) != len(latencies):
                        raise RuntimeError(f"{name}: statuses {statuses}")
                    rates[name].append(len(latencies) / elapsed)
                    cpu[name].append((_cpu_seconds(process.pid) - before) / len(latencies))
                print(
                    f"round {round_index + 1}: switchboard {rates['switchboard'][-1]:.0f}/s "
                    f"({cpu['switchboard'][-1] * 1000:.2f} ms CPU each), bare route {rates['bare'][-1]:.0f}/s "
                    f"({cpu['bare'][-1] * 1000:.2f} ms CPU each)",
                    flush=True,
                )
        except BaseException:
            log.flush()
            print("server log (tail):\n" + (directory / "serve.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            stop(serve)
            stop(bare)
            log.close()
        with sqlite3.connect(directory / "bench.db") as db:
            stored = db.execute("SELECT count(*) FROM github_deliveries").fetchone()[0]
    ours, theirs = statistics.median(rates["switchboard"]), statistics.median(rates["bare"])
    our_cpu, their_cpu = statistics.median(cpu["switchboard"]), statistics.median(cpu["bare"])
    print(
        f"scenario            {args.scenario}, {args.deliveries} per round × {args.rounds} rounds, concurrency {args.concurrency}"
    )
    print(f"switchboard         median {ours:.0f} deliveries/s, {our_cpu * 1000:.2f} ms server CPU each")
    print(f"bare FastAPI route  median {theirs:.0f} requests/s, {their_cpu * 1000:.2f} ms server CPU each")
    print(
        f"ingest ratio        {ours / theirs:.2f}× throughput, {their_cpu / our_cpu:.2f}× by CPU per request"
    )
    print(f"stored in SQLite    {stored} rows (expected {total})")
    print(f"machine             {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"goal (≥ 0.8× the bare route): {'met' if ours / theirs >= 0.8 else 'NOT met'}")
    return 0 if stored == total else 1


async def wait_listening(base: str, process: subprocess.Popen[bytes], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(base_url=base, trust_env=False) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError("the bare app exited during start-up")
            try:
                await client.get("/")
                return
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    raise RuntimeError("the bare app did not start in time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--scenario", choices=["nomatch", "fire"], default="nomatch")
    parser.add_argument("--extra-path", help="prepended to the server's PYTHONPATH (e.g. where uvloop is)")
    parser.add_argument("--bare", action="store_true", help="compare with a bare FastAPI route (ratio)")
    parser.add_argument("--rounds", type=int, default=3, help="with --bare: alternating rounds, median")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
