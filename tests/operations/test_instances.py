"""Instances and their database: one per SQLite file, any number starting together on PostgreSQL.

Two services on one SQLite file would each run the other's inbox entries and answer messages twice, so
the second is refused with a sentence that says what to do. On PostgreSQL, instances started at the same
moment on a fresh database used to crash on concurrent ``CREATE TABLE``; schema creation now runs under
an advisory lock and they all come up.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.foundation.test_cli import cli_env, free_port

pytestmark = pytest.mark.slow

PG_URL = os.environ.get("SWITCHBOARD_TEST_PG_URL")


def write_config(tmp_path: Path, llm_url: str, database_url: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(
        f"data_dir: {tmp_path / ('data-' + path.stem)}\n"
        f"database: {{url: '{database_url}'}}\n"
        f"models: [{{name: default, model: fake-model, api_key: $FAKE_KEY, base_url: '{llm_url}', max_retries: 0}}]\n"
    )
    return path


class ServeProcess(subprocess.Popen[str]):
    """A ``serve`` process whose output goes to a file next to its config.

    Not a pipe: nobody reads a pipe while the test runs, and once its 64 KiB buffer is full the
    service's next log line blocks its event loop — every turn and ``/health`` stall until the test
    reads at shutdown, which looks exactly like a product hang.
    """

    def __init__(self, config: Path, port: int) -> None:
        self.log_path = config.with_suffix(".log")
        with self.log_path.open("w") as log:
            super().__init__(
                [sys.executable, "-m", "bot", "serve", "--config", str(config), "--port", str(port)],
                env=cli_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )

    def output(self) -> str:
        """Everything the process has written so far."""
        return self.log_path.read_text(errors="replace")


def serve(config: Path, port: int) -> ServeProcess:
    return ServeProcess(config, port)


def wait_healthy(port: int, proc: ServeProcess, seconds: float = 60) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}:\n{proc.output()}")
        try:
            body = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
        except httpx.HTTPError:
            body = None
        if body is not None and body["status"] != "starting":  # "starting": not open yet (bot/boot.py)
            return body  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError("serve did not answer /health")


def stop(proc: ServeProcess) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    return proc.output()


def test_a_second_instance_on_the_same_sqlite_file_is_refused_and_may_start_once_the_first_is_gone(
    tmp_path, llm
):
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'shared' / 'sb.db'}"
    first_config = write_config(tmp_path, llm.base_url, db_url, "first.yaml")
    second_config = write_config(tmp_path, llm.base_url, db_url, "second.yaml")
    first_port, second_port = free_port(), free_port()
    first = serve(first_config, first_port)
    try:
        wait_healthy(first_port, first)
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "bot",
                "serve",
                "--config",
                str(second_config),
                "--port",
                str(second_port),
            ],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"another Switchboard instance (pid {first.pid})" in second.stderr
        assert "PostgreSQL" in second.stderr and "Traceback" not in second.stderr
        # The refusal changed nothing for the instance that runs.
        assert wait_healthy(first_port, first)["database"] == "ok"

        # kill -9 leaves no lock behind: the kernel drops it with the process.
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        again = serve(second_config, second_port)
        try:
            assert wait_healthy(second_port, again)["status"] == "ok"
        finally:
            stop(again)
    finally:
        stop(first)


@pytest.fixture
def fresh_pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (the schema race only happens on a fresh one)."""
    if not PG_URL:
        pytest.skip("set SWITCHBOARD_TEST_PG_URL=postgresql+asyncpg://… to run")
    import asyncpg

    base = make_url(PG_URL)
    name = f"sb_fresh_{uuid.uuid4().hex[:10]}"
    admin = base.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)

    async def admin_sql(sql: str) -> None:
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin_sql(f'CREATE DATABASE "{name}"'))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.mark.postgres
def test_instances_started_at_the_same_moment_on_a_fresh_postgres_database_all_come_up(
    tmp_path, llm, fresh_pg_database
):
    ports = [free_port() for _ in range(3)]
    configs = [write_config(tmp_path, llm.base_url, fresh_pg_database, f"i{n}.yaml") for n in range(3)]
    procs = [serve(config, port) for config, port in zip(configs, ports, strict=True)]
    outputs: list[str] = []
    try:
        for port, proc in zip(ports, procs, strict=True):
            assert wait_healthy(port, proc, seconds=90)["database"] == "ok"
    finally:
        outputs = [stop(proc) for proc in procs]
    for output in outputs:
        assert "duplicate key" not in output and "Traceback" not in output, output
