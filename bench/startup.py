"""Benchmark: ``switchboard serve`` process start → first 200 from ``/health``, against a bare app.

Each run starts a real ``python -m bot serve`` subprocess with a fresh temporary config (SQLite, no
channels, one model whose endpoint is a closed port on 127.0.0.1 — start-up never calls it) and polls
``/health`` every 10 ms from the moment before the process is spawned. It also records when ``/health``
first reports ``"agent": "ready"`` (the LangGraph runtime built in the background). The baseline is a
bare FastAPI app with one ``/health`` route, started the same way (a ``python`` subprocess running
uvicorn), so interpreter start-up and the FastAPI/uvicorn imports cancel out of the ratio.

Runs alternate between the two so a busy moment on the machine hits both alike; medians are reported.

Run:  python -m bench.startup --runs 7
      python -m bench.startup --runs 7 --tree /path/to/older/checkout   (the same, for a before/after)
Goal: serve → /health ≤ 1 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
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


def measure(
    command: list[str], port: int, *, wait_agent: bool, tree: Path = ROOT, limit: float = 120
) -> tuple[float, float | None]:
    """Seconds from spawning ``command`` to the first 200 from /health (and to ``agent: ready``)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONPATH"] = str(tree)
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first: float | None = None
    ready: float | None = None
    try:
        while time.perf_counter() - started < limit:
            if process.poll() is not None:
                stderr = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"{command[:3]} exited during start-up:\n{stderr[-2000:]}")
            body = get_health(port)
            now = time.perf_counter() - started
            if body is not None and first is None:
                first = now
            if body is not None and (not wait_agent or body.get("agent", "ready") == "ready"):
                ready = now if wait_agent else None
                break
            time.sleep(0.01)
        if first is None:
            raise RuntimeError(f"{command[:3]} did not answer /health within {limit} s")
        return first, ready
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run(args: argparse.Namespace) -> int:
    serve_health: list[float] = []
    serve_ready: list[float] = []
    bare_health: list[float] = []
    for index in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="switchboard-startup-") as tmp:
            port = free_port()
            config = write_config(Path(tmp), port)
            command = [
                sys.executable,
                "-m",
                "bot",
                "--log-level",
                "WARNING",
                "serve",
                "--config",
                str(config),
            ]
            health, ready = measure(command, port, wait_agent=True, tree=args.tree)
        serve_health.append(health)
        if ready is not None:
            serve_ready.append(ready)
        port = free_port()
        bare, _ = measure([sys.executable, "-c", BARE_APP.format(port=port)], port, wait_agent=False)
        bare_health.append(bare)
        print(
            f"run {index + 1}: serve /health {health * 1000:.0f} ms (agent ready {(ready or 0) * 1000:.0f} ms), "
            f"bare app /health {bare * 1000:.0f} ms",
            flush=True,
        )
    serve_ms = statistics.median(serve_health) * 1000
    bare_ms = statistics.median(bare_health) * 1000
    ready_ms = statistics.median(serve_ready) * 1000 if serve_ready else float("nan")
    print(f"runs                      {args.runs}")
    print(f"serve → /health 200       median {serve_ms:.0f} ms (min {min(serve_health) * 1000:.0f} ms)")
    print(f"serve → agent ready       median {ready_ms:.0f} ms")
    print(f"bare app → /health 200    median {bare_ms:.0f} ms (min {min(bare_health) * 1000:.0f} ms)")
    print(f"ratio serve / bare        {serve_ms / bare_ms:.2f}×")
    print(f"machine                   {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"goal (/health ≤ 1 s): {'met' if serve_ms <= 1000 else 'NOT met'}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--tree",
        type=Path,
        default=ROOT,
        help="run `serve` from this source tree (e.g. an older checkout, for a before/after)",
    )
    return run(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
