"""The shipped systemd unit is valid as systemd reads it (``systemd-analyze verify``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "switchboard.service"
SHIPPED_COMMAND = "/opt/switchboard/venv/bin/switchboard"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_systemd_unit_verifies(tmp_path: Path):
    installed = shutil.which("switchboard")
    if installed is None:
        pytest.skip("the switchboard command is not on PATH")
    text = UNIT.read_text()
    assert SHIPPED_COMMAND in text
    # verify checks that ExecStart exists; point it at this machine's command, change nothing else.
    unit = tmp_path / "switchboard.service"
    unit.write_text(text.replace(SHIPPED_COMMAND, installed))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
