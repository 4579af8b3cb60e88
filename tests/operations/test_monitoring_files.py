"""deploy/prometheus/alerts.yaml and deploy/grafana/switchboard.json ask only for metrics the service
exposes, and the alerts fire when they should (``promtool test rules``, where promtool is installed;
CI installs it: .ci/run)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import bot.opsmetrics  # noqa: F401  (registers the operator gauges)
from bot.metrics import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "switchboard.json"
METRIC = re.compile(r"\b((?:switchboard|process)_[a-z_]+)\b")


def exposed() -> set[str]:
    """Every sample name /metrics can carry (a counter's ``_total``, a histogram's ``_bucket`` …)."""
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"}
    return names


def test_alerts_and_dashboard_use_only_exposed_metrics():
    names = exposed()
    rules = yaml.safe_load(ALERTS.read_text())
    alert_exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads(DASHBOARD.read_text())
    panel_exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert alert_exprs and panel_exprs
    used = {name for expr in alert_exprs + panel_exprs for name in METRIC.findall(expr)}
    assert used - names == set(), f"not exposed by the service: {sorted(used - names)}"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (apt: prometheus)")
def test_promtool_checks_and_unit_tests_the_alert_rules():
    check = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run(
        ["promtool", "test", "rules", "alerts.test.yaml"],
        cwd=ALERTS.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert test.returncode == 0, test.stdout + test.stderr
