"""Issue 31: no module of the service falls below maintainability B (radon's maintainability index).

A module that grows into one long class or one long function drops to C (index under 10) — as
``bot/manager.py``, ``agent/runtime.py``, the approval check's rules and the live reply did before they
were split. This test names the module the moment it happens, while the split is still small.
"""

from __future__ import annotations

from pathlib import Path

from radon.metrics import mi_rank, mi_visit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "channels", "connections", "agent", "webhooks", "config")


def test_every_module_is_maintainability_b_or_better() -> None:
    below_b: dict[str, float] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            index = mi_visit(path.read_text(encoding="utf-8"), multi=True)
            if mi_rank(index) not in ("A", "B"):
                below_b[str(path.relative_to(ROOT))] = round(index, 2)
    assert below_b == {}, f"split these modules by job (radon mi): {below_b}"
