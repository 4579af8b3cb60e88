"""The settings every streaming/platform benchmark shares: a scratch database, the fake model, no memory.

Memory extraction is off so each answer costs exactly one model call and the counts compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def scratch_overrides(tmp: str | Path, model_url: str) -> dict[str, Any]:
    """``load_settings(overrides=…)`` keys for a throwaway service in ``tmp`` answering from ``model_url``."""
    data = Path(tmp) / "data"
    return {
        "data_dir": str(data),
        "database": {"url": f"sqlite+aiosqlite:///{data / 'sb.db'}"},
        "models": [{"name": "default", "model": "fake", "api_key": "sk-x", "base_url": model_url}],
        "memory": {"enabled": False},
    }
