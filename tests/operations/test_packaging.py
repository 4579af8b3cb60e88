"""The wheel is a complete install: built from this tree, installed into a fresh venv, it answers
``switchboard --version`` and ``switchboard init`` writes the shipped starter config and deploy files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bot.version import DISTRIBUTION, VERSION

ROOT = Path(__file__).resolve().parents[2]
#: What a build reads; the tests, docs and caches stay behind so the copy is quick.
SOURCES = (
    "pyproject.toml",
    "README.md",
    "config.example.yaml",
    "deploy",
    "bot",
    "channels",
    "config",
    "connections",
    "agent",
    "webhooks",
)


def _clean_env() -> dict[str, str]:
    """The venv's own ``bot`` must be the one imported, not this checkout through ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def build_wheel(workdir: Path) -> Path:
    """The wheel of this tree, built from a copy (setuptools writes ``build/`` next to its sources)."""
    src = workdir / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=ignore)
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    out = workdir / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
    )
    assert result.returncode == 0, result.stderr
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_is_named_ours_and_carries_the_starter_config_and_deploy_files(wheel: Path):
    assert wheel.name.startswith(f"{DISTRIBUTION.replace('-', '_')}-{VERSION}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "bot/_data/config.example.yaml" in names
    assert "bot/_data/deploy/switchboard.service" in names
    shipped = zipfile.ZipFile(wheel).read("bot/_data/config.example.yaml")
    assert shipped == (ROOT / "config.example.yaml").read_bytes()  # the symlink was followed, not stored


@pytest.mark.slow
def test_installed_wheel_runs_version_and_init_in_a_fresh_venv(wheel: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    # System site-packages carry the dependencies, so the install needs no network (--no-deps).
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120
    )
    env = _clean_env()
    pip = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert pip.returncode == 0, pip.stderr
    command = str(venv / "bin" / "switchboard")
    work = tmp_path / "work"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [command, *args], cwd=work, capture_output=True, text=True, timeout=120, env=env
        )

    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import bot; print(bot.__file__)"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr  # the wheel, not this checkout

    assert run("--version").stdout.strip() == f"switchboard {VERSION}"

    first = run("init", "--deploy-dir", "deploy")
    assert first.returncode == 0, first.stderr
    assert (work / "config.yaml").read_bytes() == (ROOT / "config.example.yaml").read_bytes()
    assert (work / "deploy" / "switchboard.service").read_bytes() == (
        ROOT / "deploy" / "switchboard.service"
    ).read_bytes()

    checked = run("config", "check")  # the starter config is usable as written
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "config.yaml: no problems found"

    (work / "config.yaml").write_text("server: {port: 9999}\n")
    again = run("init")
    assert again.returncode == 1
    assert "config.yaml already exists; not overwriting it" in again.stderr
    assert (work / "config.yaml").read_text() == "server: {port: 9999}\n"  # left alone
