"""Reliability: ``kill -9`` a real ``python -m bot serve`` at random moments; count lost, doubled and stale.

Everything is real except the two platforms: a FakeTelegram Bot API and a FakeOpenAI model run in this
process on 127.0.0.1; the service is a subprocess (``python -m bot serve``) configured to use them, with
its own SQLite database that survives the kills. Each cycle starts the service, lets users write into a
few chats (several messages per chat, so "⏳ Queued" notices appear), waits until the service is polling
and then kills it with SIGKILL after a random delay — during polling, storing, streaming or finishing.
After the last cycle one more start runs until everything is answered, and stops with SIGTERM.

Then, per user message: **lost** = no bot message holds its answer; **duplicated** = more than one does;
**stale** = a bot message whose final text is not an answer (a left-behind "…" placeholder, "⏳ Queued"
notice or half-streamed text).

Run:  python -m bench.reliability_telegram --cycles 30 [--seed 1]

``--window N`` measures instead, in one process and without kills, the window those stale messages
come from: from the moment the fake Bot API has created a bot message (``sendMessage`` handled) to the
commit of its id in the inbox — for N user messages sent in bursts while earlier answers stream, so
most of them get a "⏳ Queued" notice.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.fakes.telegram import FakeTelegram

for _name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(_name, None)

BOT_USERNAME = "switchboard_bot"
#: Streamed slowly enough (about 1 s per answer) that kills land mid-stream, and long enough to edit.
ANSWER_PADDING = " la" * 12
CHATS = (501, 502, 503)


def answer_for(text: str) -> str:
    """The fake model's deterministic answer to a user message."""
    return f"echo: {text}{ANSWER_PADDING}"


def slow_answer(request: dict[str, Any]) -> Reply:
    return Reply(text=answer_for(last_user_text(request).strip()), chunk_size=3, delay=0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(directory: Path, tg: FakeTelegram, llm: FakeOpenAI, *, queue_size: int = 1000) -> Path:
    """A serve config pointing at the two fakes; the database lives in ``directory`` across restarts.

    A small ``queue_size`` keeps the backlog at Telegram (fetched updates wait for the full service),
    so kills land while updates are fetched but not yet stored.
    """
    data = directory / "data"
    path = directory / "config.yaml"
    path.write_text(
        "server: {host: 127.0.0.1, port: 0}\n"
        f"data_dir: '{data}'\n"
        f"database: {{url: 'sqlite+aiosqlite:///{data / 'sb.db'}'}}\n"
        f"models: [{{name: default, model: fake-model, api_key: sk-fake, base_url: '{llm.base_url}', "
        "max_retries: 0}]\n"
        "memory: {enabled: false}\n"
        f"bus: {{drain_seconds: 2, queue_size: {queue_size}}}\n"
        "channels:\n"
        f"  telegram: {{enabled: true, bot_token: '{tg.token}', bot_username: {BOT_USERNAME}, "
        f"api_base_url: '{tg.url}', edit_interval_seconds: 0.05, group_edit_interval_seconds: 0.05, "
        # The edit path: these scenarios see an answer start by its first message in the chat, which a
        # draft (an ephemeral preview) never is. Queued notices are messages on either path.
        # The load's users are members (a stranger's private message would get a pairing request).
        "poll_timeout_seconds: 1, private_drafts: false, trust: {members: ['*']}}\n"
    )
    return path


class ServeProcess:
    """``python -m bot serve`` as an operator runs it; its output goes to a log file for post-mortems."""

    def __init__(self, config: Path, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
        self._log = log.open("ab")
        self.port = free_port()  # its HTTP port: /health, /ready, /metrics
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve", "--config", str(config), "--port", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs in the service."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._log.close()

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM: the graceful stop (pause channels, drain, stop)."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._log.close()
        return code


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def wait_until_polling(tg: FakeTelegram, timeout: float = 60) -> bool:
    """True once a getUpdates arrives after this call: the (new) service is taking messages."""
    before = len(tg.calls("getUpdates"))
    return wait_for(lambda: len(tg.calls("getUpdates")) > before, timeout)


@dataclass
class Outcome:
    cycles: int
    messages: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    kills_while_polling: int = 0  # the rest hit the service while it was still starting
    redelivered: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.stale)


def judge(tg: FakeTelegram, sent: dict[int, list[str]], outcome: Outcome) -> None:
    """Compare what each chat shows with what every user message deserved."""
    for chat, texts in sent.items():
        shown = tg.bot_texts(chat)
        expected = {answer_for(t) for t in texts}
        for text in texts:
            count = shown.count(answer_for(text))
            if count == 0:
                outcome.lost.append(f"{chat}:{text}")
            elif count > 1:
                outcome.duplicated.append(f"{chat}:{text}")
        outcome.stale.extend(
            f"{chat}#{m.message_id}:{m.text[:40]!r} ({m.edits} edits)"
            for m in tg.bot_messages(chat)
            if m.text not in expected
        )


def all_answered(tg: FakeTelegram, sent: dict[int, list[str]]) -> bool:
    for chat, texts in sent.items():
        shown = set(tg.bot_texts(chat))
        if any(answer_for(t) not in shown for t in texts):
            return False
    return True


def run_cycles(
    cycles: int, workdir: Path, *, seed: int = 1, per_cycle: int = 4, queue_size: int = 1000
) -> Outcome:
    """``cycles`` random kill -9s, then one run to completion; returns what the chats show."""
    rng = random.Random(seed)
    outcome = Outcome(cycles=cycles)
    sent: dict[int, list[str]] = {chat: [] for chat in CHATS}
    started = time.monotonic()
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg, FakeOpenAI(slow_answer) as llm:
        config = write_config(workdir, tg, llm, queue_size=queue_size)  # type: ignore[arg-type]
        log = workdir / "serve.log"
        for cycle in range(cycles):
            service = ServeProcess(config, log)
            polling = wait_until_polling(tg)  # type: ignore[arg-type]
            kill_at = time.monotonic() + rng.uniform(0.0, 2.5)
            for number in range(per_cycle):
                chat = rng.choice(CHATS)
                text = f"c{cycle}m{number}"
                tg.user_message(chat, text, user_id=chat)  # type: ignore[attr-defined]
                sent[chat].append(text)
                time.sleep(rng.uniform(0.0, 0.4))
            time.sleep(max(0.0, kill_at - time.monotonic()))
            service.kill()
            if polling:
                outcome.kills_while_polling += 1
        service = ServeProcess(config, log)
        finished = wait_for(lambda: all_answered(tg, sent), timeout=120)  # type: ignore[arg-type]
        time.sleep(1.5)  # let any late duplicate show up before judging
        service.terminate()
        outcome.messages = sum(len(t) for t in sent.values())
        outcome.redelivered = tg.delivered - outcome.messages  # type: ignore[attr-defined]
        judge(tg, sent, outcome)  # type: ignore[arg-type]
        if not finished and not outcome.lost:
            outcome.lost.append("(the final run did not finish in 120 s)")
    outcome.seconds = time.monotonic() - started
    return outcome


class StampingTelegram(FakeTelegram):
    """The fake Bot API, noting when each bot message came into existence (``sendMessage`` handled)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.created: dict[int, float] = {}
        self._stamps = threading.Lock()

    def _m_sendMessage(self, params: dict[str, Any], uploads: Any) -> dict[str, Any]:
        payload = super()._m_sendMessage(params, uploads)
        with self._stamps:
            self.created[int(payload["message_id"])] = time.perf_counter()
        return payload


async def measure_window(messages: int, workdir: Path, seed: int = 1) -> dict[str, list[float]]:
    """Seconds from "the message exists at Telegram" to "its id is committed", per kind of reference."""
    from bot.bus import MessageBus
    from bot.inbox import Inbox, InboxOp
    from bot.service import Service
    from channels.resume import ReplyState
    from config.loader import load_settings

    rng = random.Random(seed)
    committed: dict[str, tuple[float, str]] = {}  # ref -> (when, kind)
    arrived: dict[str, float] = {}  # ref -> when our code had it (the way back from Telegram is over)

    def newest(op: InboxOp) -> str:
        return ReplyState.from_json(op.args["reply_state"]).parts[-1].ref

    class TimedInbox(Inbox):
        # Each store names the reply's newest message (its first one: a placeholder or a queued notice).
        def set_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
            arrived.setdefault(reply.parts[-1].ref, time.perf_counter())
            self._kind = "placeholder or notice" if len(reply.parts) == 1 else "overflow message"
            super().set_reply_ref(entry_id, reply)

        def stage_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
            arrived.setdefault(reply.parts[-1].ref, time.perf_counter())
            self._kind = "placeholder or notice" if len(reply.parts) == 1 else "overflow message"
            super().stage_reply_ref(entry_id, reply)

        async def save_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
            arrived.setdefault(reply.parts[-1].ref, time.perf_counter())
            self._kind = "placeholder or notice" if len(reply.parts) == 1 else "overflow message"
            await super().save_reply_ref(entry_id, reply)

        def _write_ref_now(self, op: InboxOp) -> bool:
            written = super()._write_ref_now(op)
            if written:
                committed[newest(op)] = (time.perf_counter(), self._kind)
            return written

        def _queue_ref(self, op: InboxOp, *, unawaited: bool = False) -> asyncio.Future[Any]:
            future = super()._queue_ref(op, unawaited=unawaited)
            kind = self._kind
            future.add_done_callback(lambda _f: committed.setdefault(newest(op), (time.perf_counter(), kind)))
            return future

    with StampingTelegram(bot_username=BOT_USERNAME, long_poll_cap=1.0) as tg, FakeOpenAI(slow_answer) as llm:
        config = write_config(workdir, tg, llm)  # type: ignore[arg-type]
        settings = load_settings(config, env={})
        service = Service(settings)
        service.inbox = TimedInbox(service.db, max_attempts=settings.bus.max_attempts)
        service.bus = MessageBus(service.inbox, settings.bus.queue_size)
        await service.start()
        sent: dict[int, list[str]] = {chat: [] for chat in CHATS}
        try:
            for number in range(messages):
                chat = rng.choice(CHATS)
                text = f"w{number}"
                tg.user_message(chat, text, user_id=chat)
                sent[chat].append(text)
                await asyncio.sleep(rng.uniform(0.0, 0.3))
            await tg.wait_until(lambda: all_answered(tg, sent), timeout=120)  # type: ignore[arg-type]
        finally:
            await service.stop()
    windows: dict[str, list[float]] = {}
    for ref, (when, kind) in committed.items():
        created = tg.created.get(int(ref))
        if created is not None:
            windows.setdefault(f"{kind}: created at Telegram -> id committed", []).append(when - created)
            windows.setdefault(f"{kind}:   of which Telegram -> our code", []).append(arrived[ref] - created)
            windows.setdefault(f"{kind}:   of which our code -> committed", []).append(when - arrived[ref])
    return windows


def print_window(windows: dict[str, list[float]]) -> None:
    for kind, values in sorted(windows.items()):
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
        print(
            f"{kind}: {len(ordered)} ids, median "
            f"{statistics.median(ordered) * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms, max {ordered[-1] * 1000:.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-cycle", type=int, default=4, help="user messages sent per cycle")
    parser.add_argument("--queue-size", type=int, default=1000, help="bus.queue_size of the service")
    parser.add_argument("--keep", type=Path, help="keep the database and serve.log in this directory")
    parser.add_argument(
        "--window",
        type=int,
        metavar="N",
        help="measure the id-commit window for N messages instead (no kills)",
    )
    args = parser.parse_args()
    # The fake model writing to a service that was just killed is expected; its tracebacks are noise.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    if args.window:
        with tempfile.TemporaryDirectory(prefix="sb-window-") as tmp:
            print_window(asyncio.run(measure_window(args.window, Path(tmp), args.seed)))
        return
    with tempfile.TemporaryDirectory(prefix="sb-reliability-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        outcome = run_cycles(
            args.cycles, workdir, seed=args.seed, per_cycle=args.per_cycle, queue_size=args.queue_size
        )
    print(f"cycles (kill -9):       {outcome.cycles} (bus.queue_size {args.queue_size})")
    print(f"kills while polling:    {outcome.kills_while_polling}")
    print(f"user messages:          {outcome.messages}")
    print(f"updates redelivered:    {outcome.redelivered}")
    print(f"lost:                   {len(outcome.lost)} {outcome.lost[:5]}")
    print(f"duplicated replies:     {len(outcome.duplicated)} {outcome.duplicated[:5]}")
    print(f"stale notices/messages: {len(outcome.stale)} {outcome.stale[:5]}")
    print(f"wall time:              {outcome.seconds:.0f} s")
    raise SystemExit(0 if outcome.ok else 1)


if __name__ == "__main__":
    main()
