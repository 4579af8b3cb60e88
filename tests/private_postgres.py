"""A PostgreSQL server of the test's own, which the test may stop and start (an outage on demand).

The shared server (``SWITCHBOARD_TEST_PG_URL``) serves every other test running at the same time and
must never be stopped. This one is made with ``initdb`` in a temporary directory, listens on a free
127.0.0.1 port and is driven by ``pg_ctl``: the Debian ``postgresql`` package's binaries, as in CI.
PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user (``runuser``);
as any other user it runs as that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _bindir() -> Path | None:
    """The newest installed server's binaries (``/usr/lib/postgresql/<version>/bin``), or PATH's."""
    root = Path("/usr/lib/postgresql")
    versions = sorted(
        (p for p in root.glob("*/bin") if (p / "pg_ctl").exists()),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in p.parent.name.split(".")],
    )
    if versions:
        return versions[-1]
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    """``start()``/``stop()`` at will; ``url`` for SQLAlchemy (asyncpg). Skips the test when it cannot
    run a server here, saying why."""

    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")
        self.bindir = bindir
        self.prefix: list[str] = []
        owner: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no 'postgres' user to run the server as")
            self.prefix, owner = ["runuser", "-u", "postgres", "--"], "postgres"
        self.root = Path(tempfile.mkdtemp(prefix="sb-private-pg-"))
        self.root.chmod(0o755)  # the server's user must reach its data directory
        self.data = self.root / "data"
        self.data.mkdir(mode=0o700)
        if owner is not None:
            shutil.chown(self.data, owner, owner)
        self.port = _free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [*self.prefix, str(self.bindir / tool), *args], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"), "-o", options, "-w", "start"
        )

    def stop(self) -> None:
        """Stop the server the way an operator's restart does: clients are disconnected at once."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
