"""Benchmark: where an idle ``switchboard serve`` keeps its resident memory (issue 32, item 6).

``bench/startup.py`` says how much (``Rss`` one second after ``/ready``); this says what it is. Each run
starts ``serve`` (the same bare config as ``bench/startup.py``) with a watcher thread inside the process
that, one second after ``/ready`` first answers 200, records:

* ``/proc/self/smaps_rollup``: anonymous memory (Python objects, malloc) vs file-backed (shared
  libraries' mapped code — shared with other processes, but counted in ``Rss``), and the biggest
  mapped files;
* the Python object allocator's own arenas (``sys._debugmallocstats``): how much of the anonymous
  memory is small Python objects, and how full the arenas are (a fragmented heap would show here);
* the threads (each has its own glibc malloc arena) and every module in ``sys.modules``.

Then a fresh interpreter imports only the third-party and standard-library modules of that list — none
of ours — and its ``Rss`` is the **floor**: what the packages a ready service needs cost by themselves,
before any of our code or data exists. The watcher talks to ``/ready`` over a bare socket so that it
imports nothing the service would not have imported anyway.

Run:  python -m bench.idle_memory --runs 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.startup import ROOT, compile_tree, free_port, write_config

OURS = ("bot", "agent", "channels", "config", "connections", "webhooks")

#: Runs in the child: the service in the main thread, the watcher in a daemon thread.
CHILD = """
import json, os, signal, socket, sys, threading, time

def ready():
    try:
        with socket.create_connection(("127.0.0.1", {port}), timeout=2) as sock:
            sock.sendall(b"GET /ready HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False

def mapped_files():
    rss, name = {{}}, None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            if not parts[0].endswith(":"):
                name = parts[5] if len(parts) > 5 and parts[5].startswith("/") else None
            elif parts[0] == "Rss:" and name:
                rss[name] = rss.get(name, 0) + int(parts[1])
    return rss

def watch():
    while not ready():
        time.sleep(0.05)
    time.sleep(1)
    with open("/proc/self/smaps_rollup") as rollup:
        fields = {{l.split(":")[0]: int(l.split()[1]) for l in rollup if l.split()[-1] == "kB"}}
    stats = os.open({stats!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(2)
    os.dup2(stats, 2)
    sys._debugmallocstats()
    os.dup2(saved, 2)
    os.close(stats)
    report = {{
        "rollup": fields,
        "files": mapped_files(),
        "threads": [t.name for t in threading.enumerate()],
        "tasks": len(os.listdir("/proc/self/task")),
        "modules": sorted(sys.modules),
    }}
    with open({out!r}, "w") as file:
        json.dump(report, file)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=watch, daemon=True, name="bench-watcher").start()
from bot.cli import main
raise SystemExit(main(["--log-level", "WARNING", "serve", "--config", {config!r}]))
"""

#: Imports the listed modules (none of ours) in a fresh interpreter and prints its Rss in kB.
FLOOR = """
import gc, importlib, json, sys
for name in json.load(open(sys.argv[1])):
    try:
        importlib.import_module(name)
    except Exception:
        pass  # platform-only modules (nt, _winapi) that a list from sys.modules can name
gc.collect()
print(next(int(l.split()[1]) for l in open("/proc/self/smaps_rollup") if l.startswith("Rss:")))
"""


def arenas(stats: str) -> tuple[int, int]:
    """(arenas in use × their size, bytes in allocated blocks) from ``sys._debugmallocstats`` output."""
    total = re.search(r"arenas \* \d+ bytes/arena\s+=\s+([\d,]+)", stats)
    used = re.search(r"# bytes in allocated blocks\s+=\s+([\d,]+)", stats)
    if total is None or used is None:
        raise RuntimeError(f"unexpected _debugmallocstats output:\n{stats[:500]}")
    return int(total[1].replace(",", "")), int(used[1].replace(",", ""))


@dataclass
class Sample:
    """One idle ``serve``: what its watcher read, and the floor measured from its module list."""

    rollup: dict[str, int]  # smaps_rollup, kB
    files: dict[str, int]  # mapped file → its Rss, kB
    threads: list[str]
    tasks: int  # every OS thread, Python's or not
    modules: list[str]
    arenas: tuple[int, int]  # (arena bytes, bytes in live blocks)
    floor_kb: int


def sample(tmp: Path) -> Sample:
    """One ``serve`` to idle: the watcher's report, the allocator's stats and the third-party floor."""
    port = free_port()
    config = write_config(tmp, port)
    out, stats = tmp / "report.json", tmp / "mallocstats.txt"
    code = textwrap.dedent(CHILD).format(port=port, out=str(out), stats=str(stats), config=str(config))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=300)
    if not out.exists():
        raise RuntimeError(f"serve never became ready:\n{done.stderr.decode(errors='replace')[-2000:]}")
    report = json.loads(out.read_text())
    modules = [m for m in report["modules"] if m.split(".")[0] not in OURS and m != "__main__"]
    names = tmp / "third_party.json"
    names.write_text(json.dumps(modules))
    floor = subprocess.run(
        [sys.executable, "-c", FLOOR, str(names)], env=env, capture_output=True, check=True
    )
    return Sample(**report, arenas=arenas(stats.read_text()), floor_kb=int(floor.stdout))


def mib(kb: float) -> str:
    return f"{kb / 1024:.1f} MiB"


def summary(reports: list[Sample]) -> list[str]:
    """Medians over the runs, and the last run's module and file lists."""

    def median(key: str) -> float:
        return statistics.median(r.rollup[key] for r in reports)

    last = reports[-1]
    biggest = sorted(last.files.items(), key=lambda item: -item[1])[:6]
    arena_total, arena_used = last.arenas
    modules = last.modules
    packages = Counter(name.split(".")[0] for name in modules)
    ours = sum(count for name, count in packages.items() if name in OURS)
    return [
        f"runs                 {len(reports)}",
        f"idle Rss             median {mib(median('Rss'))}",
        f"  anonymous          median {mib(median('Anonymous'))} (Python objects, malloc, thread stacks)",
        f"  file-backed        median {mib(median('Rss') - median('Anonymous'))} (mapped libraries: "
        + ", ".join(f"{Path(path).name} {mib(kb)}" for path, kb in biggest)
        + ")",
        f"  Python allocator   {mib(arena_total / 1024)} of arenas, {arena_used / arena_total:.0%} in live blocks",
        f"threads              {last.tasks} ({', '.join(last.threads)})",
        f"modules              {len(modules)}: ours {ours}; "
        + ", ".join(f"{name} {count}" for name, count in packages.most_common(10)),
        f"third-party floor    median {mib(statistics.median(r.floor_kb for r in reports))} "
        "(a fresh interpreter importing only the listed modules that are not ours)",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    compile_tree(ROOT)
    reports = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="switchboard-idle-") as tmp:
            reports.append(sample(Path(tmp)))
    print("\n".join(summary(reports)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
