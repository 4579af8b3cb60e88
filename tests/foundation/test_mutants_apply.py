"""Every named mutant in bench/mutants.py still applies to the code it guards.

A mutant whose code moved away is *stale*: the bug it names is no longer tried, so the guarantee it
stands for is silently unchecked. The full run (which also runs each mutant's tests) is a CI step of its
own; this cheap check runs with the suite, so a refactor that moves guarded code fails at once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_still_applies_exactly_once():
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mutants.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
