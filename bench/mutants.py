"""Named mutants: plausible one-line bugs in the code whose guarantees matter most, each applied alone to a
scratch copy of the tree, then the tests that should notice are run. A mutant the tests do not notice
("survived") is a guarantee nobody checks. docs/testing.md lists the survivors and what was done.

    python bench/mutants.py                 # every mutant
    python bench/mutants.py fifo-lane ...   # just these
    python bench/mutants.py --list
    python bench/mutants.py --check         # only: does every mutant still apply? (a test runs this)

mutmut is not installed here and generates every mutation it can, each run against the suite; this
script never touches the working tree (it copies it to a temporary directory) and runs only the few
tests that guard each named mutant, so the whole list takes minutes on two cores instead of hours.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPY = ("agent", "bot", "channels", "config", "connections", "webhooks", "tests", "pyproject.toml")
#: A mutant that makes a test hang is killed by pytest-timeout; keep that short.
TEST_TIMEOUT_SECONDS = 60


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    path: str
    original: str
    mutated: str
    tests: tuple[str, ...]
    why: str
    #: Why this mutant cannot change behaviour (an *equivalent* mutant): its survival is expected.
    equivalent: str | None = None


F = "tests/foundation"
MUTANTS: tuple[Mutant, ...] = (
    # --- bot/inbox.py -------------------------------------------------------------------------------
    Mutant(
        "dead-letter-off-by-one",
        "bot/inbox.py",
        "CASE WHEN attempts + 1 >= :max_attempts",
        "CASE WHEN attempts + 1 > :max_attempts",
        (f"{F}/test_poison_messages.py",),
        "a poison message gets one run more than bus.max_attempts",
    ),
    Mutant(
        "done-mark-lost",
        "bot/inbox.py",
        "UPDATE inbox SET status = 'done', updated_at",
        "UPDATE inbox SET status = 'pending', updated_at",
        (f"{F}/test_bus_and_inbox.py", f"{F}/test_restart_order.py"),
        "finished messages stay pending and run again",
    ),
    Mutant(
        "reply-text-not-kept",
        "bot/inbox.py",
        "reply_text = COALESCE(:reply_text, reply_text)",
        "reply_text = reply_text",
        (
            f"{F}/test_bus_and_inbox.py",
            f"{F}/test_final_delivery.py",
            f"{F}/test_restart_order.py",
        ),
        "an answer whose delivery failed is asked of the model again",
    ),
    Mutant(
        "batch-twin-both-new",
        "bot/inbox.py",
        'entry.duplicate = row["id"] != op.args["id"] or row["id"] in claimed',
        'entry.duplicate = row["id"] != op.args["id"]',
        (f"{F}/test_restart_order.py", f"{F}/test_bus_and_inbox.py"),
        "the same message twice in one group commit runs twice",
        equivalent="every accept op has its own uuid, so a twin in one batch is already a duplicate "
        "without the claimed set (kept as a guard should ids ever be assigned per dedupe key)",
    ),
    Mutant(
        "resume-newest-first",
        "bot/inbox.py",
        ".order_by(inbox_table.c.created_at, inbox_table.c.id)",
        ".order_by(inbox_table.c.created_at.desc(), inbox_table.c.id)",
        (f"{F}/test_restart_order.py", f"{F}/test_bus_and_inbox.py"),
        "after a restart, unfinished messages resume newest first",
    ),
    Mutant(
        "failed-not-resumed",
        "bot/inbox.py",
        ".where(inbox_table.c.status.in_((PENDING, FAILED)))",
        ".where(inbox_table.c.status.in_((PENDING,)))",
        (f"{F}/test_restart_order.py", f"{F}/test_bus_and_inbox.py"),
        "a failed (not yet dead) message is not retried at restart",
    ),
    # --- the manager: bot/router.py, bot/lanes.py, bot/turn_runner.py, bot/settle.py ---------------------
    Mutant(
        "lifo-lane",
        "bot/lanes.py",
        "turn = lane.pending.popleft()",
        "turn = lane.pending.pop()",
        (f"{F}/test_order_and_delivery.py", f"{F}/test_manager_flow.py"),
        "queued messages are answered last-in first-out",
    ),
    Mutant(
        "no-arrival-lock",
        "bot/router.py",
        "            async with lock, self._route_slots:",
        "            async with self._route_slots:",
        (f"{F}/test_order_and_delivery.py",),
        "a burst in one conversation reaches its lane in lookup-finish order, not arrival order",
    ),
    Mutant(
        "done-before-delivered",
        "bot/turn_runner.py",
        "                try:\n                    # A rate limit or a 5xx is retried until the answer lands",
        "                if turn.ask.entry_id:\n                    await self.inbox.mark_done(turn.ask.entry_id)\n"
        "                try:\n                    # A rate limit or a 5xx is retried until the answer lands",
        (f"{F}/test_order_and_delivery.py",),
        "the inbox marks a message done before its answer is delivered; a crash between loses it",
    ),
    Mutant(
        "identity-gate-private-only",
        "bot/router.py",
        "if self.settings.connections.require_bound_identity and not identity.bound:",
        "if self.settings.connections.require_bound_identity and not identity.bound and message.is_private:",
        (f"{F}/test_order_and_delivery.py", "tests/connections/test_chat.py"),
        "unbound senders in group chats reach the model",
    ),
    Mutant(
        "allow-list-private-only",
        "bot/router.py",
        "        if not channel.is_allowed(message):",
        "        if message.is_private and not channel.is_allowed(message):",
        (f"{F}", "tests/connections/test_chat.py"),
        "senders not on the allow-list are answered in group chats",
    ),
    Mutant(
        "dead-letter-silent",
        "bot/settle.py",
        "        if status == DEAD:",
        "        if status == 'never':",
        (f"{F}/test_poison_messages.py",),
        "the user is never told their message was set aside",
    ),
    # --- webhooks/signature.py ----------------------------------------------------------------------
    Mutant(
        "signature-prefix-compare",
        "webhooks/signature.py",
        "hmac.compare_digest(_hex_digest(secret, body).encode(), header[len(PREFIX) :].encode())",
        "hmac.compare_digest(_hex_digest(secret, body)[:-1].encode(), header[len(PREFIX) : -1].encode())",
        ("tests/github/test_verification.py",),
        "a signature wrong only in its last hex digit is accepted",
    ),
    Mutant(
        "signature-no-length-check",
        "webhooks/signature.py",
        " or len(header) != len(PREFIX) + 64",
        "",
        ("tests/github/test_verification.py",),
        "a truncated signature is reported as a mismatch instead of malformed",
    ),
    # --- channels/reply.py --------------------------------------------------------------------------
    Mutant(
        "finish-swallows-cancel",
        "channels/reply.py",
        "                if current is not None and current.cancelling():\n                    raise",
        "                if current is not None and current.cancelling():\n                    pass",
        (f"{F}/test_order_and_delivery.py",),
        "a shutdown during a hung final delivery waits forever",
    ),
    Mutant(
        "final-not-retried",
        "channels/reply.py",
        "MAX_FINAL_ATTEMPTS = 3",
        "MAX_FINAL_ATTEMPTS = 1",
        (f"{F}/test_restart_order.py", f"{F}/test_streaming.py"),
        'a final edit the platform fails once or twice is not tried again: the answer is posted anew below the "…"',
    ),
    Mutant(
        "every-final-message-staged",
        "channels/reply.py",
        "settling = priority and index == last",
        "settling = priority",
        (f"{F}/test_instant_reply.py",),
        "every message of a final answer waits for its done mark: a crash between two of them leaves "
        "the first one unfindable and the restarted turn sends it again",
    ),
    Mutant(
        "stale-update-sent",
        "channels/reply.py",
        "                if (shown == chunk and on == want) or (on is None and self._still_shows(index, chunk, want)):",
        "                if False:",
        (f"{F}/test_reply_budget.py", f"{F}/test_streaming.py"),
        "unchanged chunks are edited again (wasting the chat's rate budget)",
    ),
    # --- channels/telegram/polling.py ---------------------------------------------------------------
    Mutant(
        "poller-confirms-abandoned",
        "channels/telegram/polling.py",
        "                    update.update_id,\n                )\n                return False",
        "                    update.update_id,\n                )\n                return True",
        (
            "tests/channels/telegram/test_store_then_confirm.py::"
            "test_an_update_the_stopping_service_could_not_store_stays_with_telegram",
        ),
        "at stop, an update the service refused is confirmed anyway: Telegram forgets a message never stored",
    ),
    # --- webhooks/store.py --------------------------------------------------------------------------
    Mutant(
        "stuck-at-once",
        "webhooks/store.py",
        "time.time() - self.updated_at > STUCK_AFTER_SECONDS",
        "time.time() - self.updated_at < STUCK_AFTER_SECONDS",
        ("tests/github/test_stuck_deliveries.py",),
        "a redelivery of a delivery that may still be running runs it a second time",
    ),
    Mutant(
        "retry-while-running",
        "webhooks/store.py",
        "(c.updated_at < stuck_before)",
        "(c.updated_at > stuck_before)",
        ("tests/github/test_stuck_deliveries.py",),
        "an operator's retry queues a delivery that may still be running (and not one that is stuck)",
    ),
    # --- bot/approvals.py ---------------------------------------------------------------------------
    Mutant(
        "approval-from-anywhere",
        "bot/approvals.py",
        "if asked_in.conversation_key != message.conversation_key and not admin:",
        "if False:",
        (
            "tests/agent/test_approvals.py::test_the_requesters_yes_from_another_conversation_is_refused_an_admins_is_not",
        ),
        "the requester approves a command from a conversation that never showed the request",
    ),
    Mutant(
        "admin-bound-to-conversation",
        "bot/approvals.py",
        "if asked_in.conversation_key != message.conversation_key and not admin:",
        "if asked_in.conversation_key != message.conversation_key:",
        (
            "tests/agent/test_approvals.py::test_the_requesters_yes_from_another_conversation_is_refused_an_admins_is_not",
        ),
        "an admin cannot decide a request from the admin's own DM",
    ),
    # --- connections/store.py -----------------------------------------------------------------------
    Mutant(
        "expired-code-accepted",
        "connections/store.py",
        "                    c.expires_at > now,\n                    c.provider == identity.provider,",
        "                    c.provider == identity.provider,",
        ("tests/connections/test_chat.py",),
        "an expired connect code still binds",
    ),
    Mutant(
        "code-for-any-provider",
        "connections/store.py",
        "                    c.expires_at > now,\n                    c.provider == identity.provider,",
        "                    c.expires_at > now,",
        ("tests/connections/test_chat.py",),
        "a Slack code binds a Telegram account",
    ),
    Mutant(
        "used-code-reusable",
        "connections/store.py",
        "                    c.code_hash == hashed,\n                    c.used_at.is_(None),",
        "                    c.code_hash == hashed,",
        ("tests/connections/test_chat.py", "tests/connections/test_races.py"),
        "a used connect code binds a second account",
    ),
    Mutant(
        "pending-limit-raised",
        "connections/store.py",
        "MAX_PENDING_CODES = 5",
        "MAX_PENDING_CODES = 6",
        ("tests/connections/test_api.py", "tests/connections/test_races.py"),
        "more than five pending codes per person and provider",
    ),
    Mutant(
        "rebind-keeps-old-owner",
        "connections/store.py",
        "                .values(status=REVOKED, revoked_at=now, updated_at=now)\n            )\n        new_id",
        "                .values(updated_at=now)\n            )\n        new_id",
        ("tests/connections/test_chat.py", "tests/connections/test_races.py"),
        "a second owner binding an account leaves the first owner's connection active",
    ),
)


def run(mutant: Mutant, scratch: Path) -> tuple[str, float]:
    """Apply ``mutant`` to the scratch tree, run its tests, restore. Returns (killed|survived|stale, s)."""
    target = scratch / mutant.path
    pristine = (ROOT / mutant.path).read_text()
    if pristine.count(mutant.original) != 1:
        return "stale", 0.0  # the code changed: the mutant no longer applies exactly once
    target.write_text(pristine.replace(mutant.original, mutant.mutated))
    env = {**os.environ, "PYTHONPATH": str(scratch), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [
        sys.executable, "-m", "pytest", "-q", "-x", "-n0", "-p", "no:cacheprovider",
        "-m", "heavy or not heavy",  # a mutant's tests run whatever their mark (tests/conftest.py HEAVY)
        "-o", f"timeout={TEST_TIMEOUT_SECONDS}", *mutant.tests,
    ]  # fmt: skip
    started = time.monotonic()
    try:
        result = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, check=False)
    finally:
        target.write_text(pristine)
    return ("survived" if result.returncode == 0 else "killed"), time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--check", action="store_true", help="only check that every mutant still applies (no tests run)"
    )
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.list:
        for m in chosen:
            print(f"{m.name:28} {m.path:24} {m.why}")
        return 0
    if args.check:
        stale = [m for m in chosen if (ROOT / m.path).read_text().count(m.original) != 1]
        for mutant in stale:
            print(f"STALE: {mutant.name}: its code is no longer found once in {mutant.path}")
        print(f"{len(chosen) - len(stale)}/{len(chosen)} mutants apply")
        return 1 if stale else 0
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"unknown mutant(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="switchboard-mutants-") as tmp:
        scratch = Path(tmp)
        for name in COPY:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, scratch / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, scratch / name)
        outcomes: dict[str, list[Mutant]] = {"killed": [], "survived": [], "stale": []}
        for mutant in chosen:
            outcome, seconds = run(mutant, scratch)
            print(f"{outcome:8} {seconds:6.1f}s  {mutant.name:28} {mutant.why}", flush=True)
            outcomes[outcome].append(mutant)
    equivalent = [m for m in outcomes["survived"] if m.equivalent]
    survivors = [m for m in outcomes["survived"] if not m.equivalent]
    print(f"\n{len(outcomes['killed'])}/{len(chosen)} killed, {len(equivalent)} equivalent")
    for mutant in equivalent:
        print(f"  equivalent: {mutant.name}: {mutant.equivalent}")
    for mutant in survivors:
        print(f"  NOT KILLED: {mutant.name} ({mutant.path}): {mutant.why}")
    for mutant in outcomes["stale"]:
        print(f"  STALE: {mutant.name}: its code is no longer found once in {mutant.path}; update the mutant")
    # CI fails on a mutant nobody notices and on one that no longer applies (its guarantee went unchecked).
    return 1 if survivors or outcomes["stale"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
