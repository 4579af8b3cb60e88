"""The container and Kubernetes files say only what the service understands.

Every variable they set is loaded the way ``serve`` loads it, and each must change the settings (a
``SWITCHBOARD_*`` name that maps to no key, or a secret nothing reads, is a silent no-op in production);
every ``$NAME`` the config refers to is provided. ``deploy/install.sh`` runs for real into a temporary
prefix (no apt, no user: the CI machine is also a developer's shell) and in ``--check`` mode for the
system steps; the Dockerfile runs the same script for real (docs/deploy.md#containers).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.version import VERSION
from config import ConfigError, load_settings
from config.schema import Settings
from tests.operations.test_packaging import build_wheel

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: Read by something other than the settings: the config file's path, Python, the PostgreSQL image.
NOT_CONFIG = {"SWITCHBOARD_CONFIG", "PYTHONUNBUFFERED"}


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def k8s() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            docs[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return docs


def dockerfile_env() -> dict[str, str]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(part.split("=", 1) for part in shlex.split(line[4:]))  # type: ignore[misc]
    return env


#: What an operator exports before ``docker compose up`` (the file's comment lists them).
OPERATOR = {
    "DB_PASSWORD": "db-password-0123",
    "SWITCHBOARD_JWT_SECRET": "jwt-secret-0123456789",
    "OPENAI_API_KEY": "sk-stand-in",
    "TELEGRAM_BOT_TOKEN": "123:stand-in-token",
    "TELEGRAM_ENABLED": "true",
    "PUBLIC_URL": "https://bot.example.com",
}


def compose_value(text: str) -> str:
    """``${VAR}``, ``${VAR:?message}`` and ``${VAR:-default}`` as compose fills them from :data:`OPERATOR`."""

    def fill(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2), match.group(3)
        if name in OPERATOR:
            return OPERATOR[name]
        assert op == ":-", f"${{{name}}} is required but not in the file's list of variables"
        return rest

    return re.sub(r"\$\{(\w+)(:[-?])?([^}]*)\}", fill, text)


def assert_every_variable_counts(env: dict[str, str], path: Path | None = None) -> Settings:
    """Loads with ``env``; and without any one variable, the settings differ or do not load (it is used)."""
    settings = load_settings(path, env=env)
    full = settings.model_dump()
    for name in env:
        if name in NOT_CONFIG:
            continue
        without = {k: v for k, v in env.items() if k != name}
        try:
            assert load_settings(path, env=without).model_dump() != full, f"{name} changes no setting"
        except ConfigError:
            continue  # required: the config does not load without it
    return settings


def test_compose_runs_two_instances_on_postgres_with_ready_health_checks_and_the_sandbox_options():
    services = compose()["services"]
    instances = {name: s for name, s in services.items() if name.startswith("switchboard")}
    assert len(instances) == 2
    assert (ROOT / instances["switchboard-a"]["build"]["dockerfile"]).is_file()
    ids = set()
    for service in instances.values():
        assert "/ready" in " ".join(service["healthcheck"]["test"])
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= set(
            service["security_opt"]
        )
        env = {k: compose_value(str(v)) for k, v in service["environment"].items()}
        settings = assert_every_variable_counts(env)
        assert settings.database.url.startswith("postgresql+asyncpg://switchboard:")
        assert settings.database.url.endswith("@postgres:5432/switchboard")
        ids.add(settings.cluster.instance_id)
    assert len(ids) == 2  # each instance has a name of its own in claims and /health
    postgres = services["postgres"]["environment"]
    assert postgres["POSTGRES_USER"] == "switchboard" and postgres["POSTGRES_DB"] == "switchboard"


def test_the_image_environment_is_config_the_service_reads():
    env = dockerfile_env()
    env["SWITCHBOARD_JWT_SECRET"] = "j" * 20  # the image insists on one (auth.mode jwt)
    settings = assert_every_variable_counts(env)
    assert settings.server.host == "0.0.0.0" and settings.auth.mode == "jwt"
    text = (DEPLOY / "Dockerfile").read_text()
    assert "/ready" in text and "USER 10001:10001" in text


def test_kubernetes_manifests_load_as_config_and_carry_what_bwrap_needs(tmp_path):
    docs = k8s()
    deployment = docs["Deployment/switchboard"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    secret = docs[f"Secret/{container['envFrom'][0]['secretRef']['name']}"]
    config_map = docs[f"ConfigMap/{pod['volumes'][0]['configMap']['name']}"]

    # The config the pod reads, with the environment it gets: loads, and every variable is used.
    config = tmp_path / "config.yaml"
    config.write_text(config_map["data"]["config.yaml"])
    env = {e["name"]: e.get("value", "switchboard-5d9c-abcde") for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")["mountPath"]
    assert env["SWITCHBOARD_CONFIG"] == f"{mount}/config.yaml"
    env.update(secret["stringData"])
    settings = assert_every_variable_counts(env, config)
    assert settings.cluster.instance_id == "switchboard-5d9c-abcde"
    assert settings.channels.telegram.bot_token == secret["stringData"]["TELEGRAM_BOT_TOKEN"]
    referenced = set(re.findall(r"\$\{?(\w+)", config_map["data"]["config.yaml"]))
    assert referenced <= set(env), f"the config refers to variables nobody sets: {referenced - set(env)}"
    data = next(m for m in container["volumeMounts"] if m["name"] == "data")["mountPath"]
    assert settings.data_dir == data

    # bubblewrap in the pod: user namespaces, mounts and a fresh /proc (docs/deploy.md#kubernetes).
    assert pod["hostUsers"] is False
    assert pod["securityContext"]["seccompProfile"]["type"] == "Unconfined"
    assert pod["securityContext"]["appArmorProfile"]["type"] == "Unconfined"
    assert container["securityContext"]["procMount"] == "Unmasked"
    assert container["securityContext"].get("privileged") is not True

    # Probes name the container's port and the routes the service has.
    ports = {p["name"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["startupProbe"]["httpGet"]["port"] in ports
    assert container["livenessProbe"]["tcpSocket"]["port"] in ports
    routes = (ROOT / "bot" / "app.py").read_text()
    assert '@app.get("/ready"' in routes
    drain = settings.bus.drain_seconds + 5
    assert pod["terminationGracePeriodSeconds"] > drain

    labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdb = docs["PodDisruptionBudget/switchboard"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1 < deployment["spec"]["replicas"]
    assert docs["Service/switchboard"]["spec"]["selector"].items() <= labels.items()


INSTALL = DEPLOY / "install.sh"


def test_install_script_options_used_by_the_dockerfile_exist():
    script = INSTALL.read_text()
    used = set(
        re.findall(r"switchboard-install((?:[^\n]|\\\n)*)", (DEPLOY / "Dockerfile").read_text())[0].split()
    )
    for option in (word for word in used if word.startswith("--")):
        assert f"    {option})" in script, f"install.sh has no {option}"


def test_install_script_check_mode_lists_the_system_steps_and_changes_nothing(tmp_path):
    result = subprocess.run(
        ["bash", str(INSTALL), "--check", "--uid", "10001", "--prefix", str(tmp_path / "opt")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    steps = result.stdout
    assert "apt-get install -y -qq --no-install-recommends bubblewrap" in steps
    assert "useradd --system" in steps or "= user switchboard exists" in steps
    assert "switchboard init --config /etc/switchboard/config.yaml" in steps
    assert not (tmp_path / "opt").exists()


def test_install_script_refuses_a_bad_option_in_one_line(tmp_path):
    result = subprocess.run(
        ["bash", str(INSTALL), "--wheel", str(tmp_path / "no.whl")], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"install.sh: no wheel at {tmp_path / 'no.whl'}"


@pytest.mark.slow
def test_install_script_installs_the_wheel_into_a_venv_with_a_starter_config(tmp_path):
    wheel = build_wheel(tmp_path / "build")
    opt, etc, state = tmp_path / "opt", tmp_path / "etc", tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = ["bash", str(INSTALL), "--skip-system", "--offline", "--python", sys.executable]
    command += ["--wheel", str(wheel), "--prefix", str(opt), "--etc", str(etc), "--state", str(state)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"install.sh: installed switchboard {VERSION} in {opt}/venv" in result.stdout
    assert (etc / "config.yaml").read_bytes() == (ROOT / "config.example.yaml").read_bytes()
    assert (state / "data").is_dir()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr
    assert f"= {etc}/config.yaml exists: kept" in again.stdout
