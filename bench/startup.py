"""Benchmark: ``switchboard serve`` process start → first 200 from ``/health``, against a bare app.

Each run starts a real ``python -m bot serve`` subprocess with a fresh temporary config (SQLite, no
channels, one model whose endpoint is a closed port on 127.0.0.1 — start-up never calls it) and polls
``/health`` every 10 ms from the moment before the process is spawned. The first 200 counts even while
it says ``"status": "starting"`` (the process answers; bot/boot.py); it also records when ``/health``
first reports ``"database": "ok"`` (the service is open: schema, inbox, channels, webhook routes) and
``"agent": "ready"`` (the LangGraph runtime built in the background), the first 200 from ``/ready``
(a turn can run) and, one second later, the process's resident memory (``Rss`` of
``/proc/PID/smaps_rollup``; the bare app's after its first ``/health``) — the idle footprint, which
unlike the clock does not depend on how busy the machine is (what that memory is made of:
``bench/idle_memory.py``). ``--importtime`` runs both
processes under ``python -X importtime`` and sums the imports finished before the first 200 — less
sensitive to a busy machine than the wall clock. The baseline is a
bare FastAPI app with one ``/health`` route, started the same way (a ``python`` subprocess running
uvicorn), so interpreter start-up and the FastAPI/uvicorn imports cancel out of the ratio.

Runs alternate between the two so a busy moment on the machine hits both alike; medians are reported.

Before the first run the tree's own packages are byte-compiled (``compileall``, into their
``__pycache__``, as ``pip install`` does for a deployment): a source tree run with
``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile our ~200 modules on every start, +0.4 s of CPU
and +2.6 MiB that no installed service pays (measured 2026-12-07).

Run:  python -m bench.startup --runs 7
      python -m bench.startup --runs 3 --importtime
      python -m bench.startup --runs 7 --tree /path/to/older/checkout   (the same, for a before/after)
Goals: serve → /health ≤ 1 s; serve → /ready ≤ 2 s on a quiet machine; idle RSS ≤ 100 MiB.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

BARE_APP = """
import uvicorn
from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
async def health():
    return {{"status": "ok"}}


uvicorn.run(app, host="127.0.0.1", port={port}, log_config=None, access_log=False)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(directory: Path, port: int) -> Path:
    dead = f"http://127.0.0.1:{free_port()}"
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "database": {"url": f"sqlite+aiosqlite:///{directory / 'bench.db'}"},
        "data_dir": str(directory / "data"),
        "sandbox": {"mode": "host"},  # bwrap's pre-flight probe is not what this measures
        "models": [{"name": "default", "model": "none", "api_key": "sk-bench", "base_url": f"{dead}/v1"}],
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def rss_mib(pid: int) -> float:
    """The process's resident set in MiB, from the kernel's own rollup of its mappings."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Rss line in /proc/{pid}/smaps_rollup")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ready_status(port: int) -> int | None:
    """The status ``/ready`` answers with (None: not listening yet)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/ready")
        response = connection.getresponse()
        response.read()
    except OSError:
        return None
    finally:
        connection.close()
    return response.status


def get_health(port: int) -> dict[str, object] | None:
    """The /health body when it answers 200, else None (not listening yet, or not healthy)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/health")
        response = connection.getresponse()
        body = response.read()
    except OSError:
        return None
    finally:
        connection.close()
    if response.status != 200:
        return None
    parsed = json.loads(body)
    return parsed if isinstance(parsed, dict) else None


@dataclass
class Startup:
    """Seconds from spawning the process to each moment (None: not waited for / not reached)."""

    health: float  # the first 200 from /health (``"status": "starting"`` counts: the process answers)
    storage: float | None = None  # the first /health with ``"database": "ok"`` (Service.open done)
    agent: float | None = None  # the first /health with ``"agent": "ready"``
    ready: float | None = None  # the first 200 from ``/ready`` (a turn can run)
    #: Resident memory (MiB, ``Rss`` of /proc/PID/smaps_rollup) one second after the service is ready
    #: (the bare app: after its first /health) — the idle footprint.
    rss_mib: float | None = None
    #: CPU seconds (user + system, every thread) the process had used at the first 200 from /ready (the
    #: bare app: from /health): like RSS, much less sensitive to a busy machine than the clock, and on
    #: a quiet one start-up's wall time is little more (it is CPU-bound: imports).
    cpu_s: float | None = None
    #: With ``-X importtime``: microseconds of imports finished before the first /health (the sum of
    #: every module's own time, any thread), and the same per top-level package.
    import_us: int | None = None
    import_top: dict[str, int] = field(default_factory=dict)


def import_totals(lines: list[str]) -> tuple[int, dict[str, int]]:
    total = 0
    top: dict[str, int] = {}
    for line in lines:
        match = IMPORT_LINE.match(line)
        if match is None:
            continue
        own, name = int(match["own"]), match["name"]
        total += own
        root = name.strip().split(".")[0]
        top[root] = top.get(root, 0) + own
    return total, top


IMPORT_LINE = re.compile(r"import time:\s+(?P<own>\d+) \|\s+\d+ \|(?P<name>.*)$")


def measure(
    command: list[str], port: int, *, wait_agent: bool, tree: Path = ROOT, limit: float = 120
) -> Startup:
    """Spawn ``command`` and poll /health until it answers (and, with ``wait_agent``, the agent is ready)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONPATH"] = str(tree)
    stderr_lines: list[str] = []
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    reader = threading.Thread(
        target=lambda: stderr_lines.extend(line.decode(errors="replace") for line in process.stderr),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()  # drained all along: -X importtime writes more than a pipe holds
    result: Startup | None = None
    try:
        while time.perf_counter() - started < limit:
            if process.poll() is not None:
                reader.join(5)
                raise RuntimeError(f"{command[:3]} exited during start-up:\n{''.join(stderr_lines)[-2000:]}")
            body = get_health(port)
            now = time.perf_counter() - started
            if body is not None and result is None:
                result = Startup(health=now, cpu_s=cpu_seconds(process.pid))
                result.import_us, result.import_top = import_totals(list(stderr_lines))
            if result is not None and body is not None:
                if result.storage is None and body.get("database") == "ok":
                    result.storage = now
                if wait_agent and result.agent is None and body.get("agent") == "ready":
                    result.agent = now
                if not wait_agent:
                    break
            if wait_agent and result is not None and ready_status(port) == 200:
                result.ready = time.perf_counter() - started
                result.cpu_s = cpu_seconds(process.pid)
                break
            time.sleep(0.01)
        if result is None or (wait_agent and result.ready is None):
            raise RuntimeError(f"{command[:3]} was not ready within {limit} s")
        time.sleep(1)  # let the start-up's last tasks finish: the idle footprint
        result.rss_mib = rss_mib(process.pid)
        return result
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


#: The tree's own packages (third-party ones were compiled when they were installed).
PACKAGES = ("bot", "agent", "channels", "config", "connections", "webhooks")


def compile_tree(tree: Path) -> None:
    """Byte-compile the tree's packages once, as an installed service has them (see the docstring)."""
    present = [name for name in PACKAGES if (tree / name).is_dir()]
    done = subprocess.run([sys.executable, "-m", "compileall", "-q", *present], cwd=tree, capture_output=True)
    if done.returncode != 0:  # say, a tree this user cannot write: measured as it is, and said so
        print(
            f"warning: could not byte-compile {tree} (not writable?): where PYTHONDONTWRITEBYTECODE is set, "
            "every start compiles our modules (+~0.4 s CPU, +~2.6 MiB)",
            file=sys.stderr,
        )


def serve_command(config: Path, *, importtime: bool) -> list[str]:
    flags = ["-X", "importtime"] if importtime else []
    return [sys.executable, *flags, "-m", "bot", "--log-level", "WARNING", "serve", "--config", str(config)]


def bare_command(port: int, *, importtime: bool) -> list[str]:
    flags = ["-X", "importtime"] if importtime else []
    return [sys.executable, *flags, "-c", BARE_APP.format(port=port)]


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def median_ms(values: list[float | None]) -> float:
    known = [v for v in values if v is not None]
    return statistics.median(known) * 1000 if known else float("nan")


def run(args: argparse.Namespace) -> int:
    compile_tree(args.tree)
    serve_runs: list[Startup] = []
    bare_runs: list[Startup] = []
    for index in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="switchboard-startup-") as tmp:
            port = free_port()
            config = write_config(Path(tmp), port)
            serve = measure(
                serve_command(config, importtime=args.importtime), port, wait_agent=True, tree=args.tree
            )
        serve_runs.append(serve)
        port = free_port()
        bare = measure(bare_command(port, importtime=args.importtime), port, wait_agent=False)
        bare_runs.append(bare)
        line = (
            f"run {index + 1}: serve /health {ms(serve.health)} (database ok {ms(serve.storage)}, "
            f"agent ready {ms(serve.agent)}, /ready {ms(serve.ready)}, CPU {serve.cpu_s:.2f} s, "
            f"RSS {serve.rss_mib:.0f} MiB), "
            f"bare app /health {ms(bare.health)} (RSS {bare.rss_mib:.0f} MiB), load {os.getloadavg()[0]:.1f}"
        )
        if args.importtime:
            line += f"; imports before /health: serve {serve.import_us / 1000:.0f} ms, bare {bare.import_us / 1000:.0f} ms"  # type: ignore[operator]
        print(line, flush=True)
    serve_ms = median_ms([r.health for r in serve_runs])
    bare_ms = median_ms([r.health for r in bare_runs])
    print(f"runs                      {args.runs}")
    print(
        f"serve → /health 200       median {serve_ms:.0f} ms (min {min(r.health for r in serve_runs) * 1000:.0f} ms)"
    )
    print(f"serve → database ok       median {median_ms([r.storage for r in serve_runs]):.0f} ms")
    print(f"serve → agent ready       median {median_ms([r.agent for r in serve_runs]):.0f} ms")
    serve_rss = statistics.median(r.rss_mib or 0.0 for r in serve_runs)
    bare_rss = statistics.median(r.rss_mib or 0.0 for r in bare_runs)
    print(f"serve → /ready 200        median {median_ms([r.ready for r in serve_runs]):.0f} ms")
    print(f"idle RSS                  serve median {serve_rss:.0f} MiB, bare app {bare_rss:.0f} MiB")
    serve_cpu = statistics.median(r.cpu_s or 0.0 for r in serve_runs)
    bare_cpu = statistics.median(r.cpu_s or 0.0 for r in bare_runs)
    print(
        f"CPU used                  serve at /ready median {serve_cpu:.2f} s, bare app at /health {bare_cpu:.2f} s"
    )
    print(
        f"bare app → /health 200    median {bare_ms:.0f} ms (min {min(r.health for r in bare_runs) * 1000:.0f} ms)"
    )
    print(f"ratio serve / bare        {serve_ms / bare_ms:.2f}×")
    if args.importtime:
        for name, runs in (("serve", serve_runs), ("bare app", bare_runs)):
            totals = [r.import_us or 0 for r in runs]
            print(f"imports before /health    {name}: median {statistics.median(totals) / 1000:.0f} ms")
            top = runs[totals.index(sorted(totals)[len(totals) // 2])].import_top
            heavy = sorted(top.items(), key=lambda item: -item[1])[:8]
            print("                          " + ", ".join(f"{n} {us / 1000:.0f}" for n, us in heavy))
    print(f"machine                   {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"goal (/health ≤ 1 s): {'met' if serve_ms <= 1000 else 'NOT met'}")
    ready_ms = median_ms([r.ready for r in serve_runs])
    print(f"goal (/ready ≤ 2 s, quiet machine): {'met' if ready_ms <= 2000 else 'NOT met'}")
    print(f"goal (idle RSS ≤ 100 MiB): {'met' if serve_rss <= 100 else 'NOT met'}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--importtime",
        action="store_true",
        help="run both with python -X importtime and report the imports finished before the first /health",
    )
    parser.add_argument(
        "--tree",
        type=Path,
        default=ROOT,
        help="run `serve` from this source tree (e.g. an older checkout, for a before/after)",
    )
    return run(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
