"""One masker for logs, tool output and replies: a secret that contains another is masked whole, whatever the
hash seed (a ``set`` once decided the order, and 5 of 8 seeds logged part of the longer secret)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent.sandbox import StreamMasker
from config.secrets import SecretMasker

INNER = "hunter2hunter2"
OUTER = f"sk-live-{INNER}-9f8e7d6c"
#: Several nested pairs, so that an order left to chance gets at least one of them wrong under most seeds.
NESTED = [(f"inner{n}x{n * 7919}", f"outer-{n}-inner{n}x{n * 7919}-tail") for n in range(6)]

LOG_ONE_LINE = f"""
import io, logging
from bot.logs import configure_logging
out = io.StringIO()
pairs = {NESTED!r}
configure_logging("INFO", [s for pair in pairs for s in pair], stream=out, fmt="text")
for inner, outer in pairs:
    logging.getLogger("probe").warning("connecting with %s", outer)
print(out.getvalue())
"""


@pytest.mark.parametrize("seed", range(1, 9))
def test_the_log_masks_a_secret_that_contains_another_whole_under_every_hash_seed(seed: int) -> None:
    result = subprocess.run(
        [sys.executable, "-c", LOG_ONE_LINE],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONHASHSEED": str(seed), "PATH": "/usr/bin:/bin", **_pythonpath()},
        check=True,
    )
    assert result.stdout.count("connecting with ***") == len(NESTED)
    for leak in ("outer-", "-tail", "inner"):
        assert leak not in result.stdout


def test_tool_output_and_a_streamed_reply_mask_a_secret_that_contains_another_whole() -> None:
    masker = SecretMasker.of({"GH_TOKEN": INNER}, [OUTER])
    assert masker(f"url={OUTER} token={INNER}") == "url=*** token=***"
    stream = StreamMasker(masker)
    shown = (
        "".join(stream.feed(part) for part in (OUTER[:10], OUTER[10:25], OUTER[25:], " done"))
        + stream.flush()
    )
    assert shown == "*** done"


def _pythonpath() -> dict[str, str]:
    import os

    return {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def test_a_tracing_backends_auth_header_never_reaches_the_sandbox_and_is_masked() -> None:
    """``OTEL_EXPORTER_OTLP_HEADERS`` carries Langfuse's (or a collector's) credentials (docs/operations.md)."""
    from agent.sandbox import scrubbed_environment
    from config.schema import Settings
    from config.secrets import known_secrets

    auth = "Basic cGstbGYtMTIzNDU2Nzg6c2stbGYtYWJjZGVmZ2g="
    environ = {
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization={auth},x-langfuse-ingestion-version=4",
        "LANG": "C",
    }
    assert scrubbed_environment(environ) == {"LANG": "C"}
    masker = SecretMasker()
    masker.add(known_secrets(Settings(), environ))
    assert masker(f"the header was {auth}") == "the header was ***"


def test_a_setting_whose_name_ends_in_key_but_holds_a_field_name_is_not_a_secret():
    """DingTalk's ``card_content_key`` names a card field ("content"); masking it turned every "content"
    in logs and console responses into ``***``."""
    from config.schema import Settings
    from config.secrets import known_secrets

    assert "content" not in known_secrets(Settings(), {})
