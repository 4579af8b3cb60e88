"""Issue 27: the bubblewrap sandbox refuses kernel attack surface, and quotas hold per conversation.

As in ``test_isolation.py`` every probe is a ``bash`` call the fake model asks for: the service runs it
in the real sandbox and the test reads the tool result the model got back and what reached the chat.
"""

from __future__ import annotations

import asyncio
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bot.app import create_app
from tests.agent.helpers import tool_results
from tests.agent.test_isolation import model, results, run, sandbox_settings  # noqa: F401 (fixture)
from tests.fakes.openai_server import Reply, ToolCall
from tests.harness import Harness

AS_ROOT = os.geteuid() == 0
#: Root on a cgroup-v1 (or hybrid) host, like this project's test machine: a cgroup per command.
V1_ROOT = AS_ROOT and all(os.access(f"/sys/fs/cgroup/{c}", os.W_OK) for c in ("memory", "pids"))

# keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0) and bpf(BPF_PROG_LOAD-ish, NULL, 0): both
# answer an ordinary process (a keyring id; EFAULT/EINVAL) unless a filter refuses them first.
SYSCALLS = """python3 -c '
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
numbers = {"x86_64": (250, 321), "aarch64": (219, 280)}[platform.machine()]
for name, nr, args in (("keyctl", numbers[0], (0, -3, 0)), ("bpf", numbers[1], (5, 0, 0))):
    result = libc.syscall(nr, *args)
    print(name, result, os.strerror(ctypes.get_errno()) if result < 0 else "ok")
'"""


async def test_bash_cannot_create_user_namespaces_or_make_refused_system_calls(tmp_path, model):  # noqa: F811
    async with Harness.running(sandbox_settings(tmp_path, model)) as h:
        nested = await run(h, "unshare -r id -u; unshare -U true; unshare --user --map-root-user --net true")
        calls = await run(h, SYSCALLS)
        # Everyday things that need clone()/threads still work (clone3 falls back to clone).
        everyday = await run(h, "python3 -c 'import threading, subprocess; t = threading.Thread(target=print); "
                                "t.start(); t.join(); print(subprocess.run([\"echo\", \"child\"], "
                                "capture_output=True, text=True).stdout.strip())'")  # fmt: skip
    assert nested.count("unshare failed: Operation not permitted") == 3, nested
    assert "keyctl -1 Operation not permitted" in calls
    assert "bpf -1 Operation not permitted" in calls
    assert everyday == "[exit code 0]\n\nchild"


# A 64-bit process making a 32-bit system call (i386 getpid through int 0x80): its numbers differ from
# the native ones, so a filter that did not check the architecture would let anything through this way.
I386_CALL = """import ctypes, mmap
code = bytes.fromhex("b814000000cd80c3")  # mov eax, 20; int 0x80; ret
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
print("i386 getpid", ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))())
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the probe is x86 machine code")
async def test_a_32_bit_system_call_from_a_64_bit_process_is_killed(tmp_path, model):  # noqa: F811
    outside = subprocess.run([sys.executable, "-c", I386_CALL], capture_output=True, text=True, check=False)
    assert outside.stdout.startswith("i386 getpid")  # the kernel runs 32-bit calls: the probe is real
    async with Harness.running(sandbox_settings(tmp_path, model)) as h:
        inside = await run(h, f"python3 - <<'EOF'\n{I386_CALL}EOF\necho status $?")
    assert "Bad system call" in inside
    assert re.search(r"i386 getpid \d", inside) is None  # (bash quotes the script when it reports the signal)
    assert inside.rstrip().endswith(f"status {128 + 31}")  # SIGSYS


async def test_health_says_which_protections_are_in_force(tmp_path, model):  # noqa: F811
    app = create_app(sandbox_settings(tmp_path, model))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sb") as client:
            body = (await client.get("/health")).json()
    assert body["sandbox"] == "bwrap"
    limits = body["sandbox_limits"]
    assert limits["seccomp"] is True
    assert limits["userns"] == "blocked"
    assert limits["disk_quota_mb"] == 2048
    # Root on a cgroup-v1 host can make a memory+pids cgroup per command; an ordinary user outside a
    # systemd Delegate=yes unit cannot.
    if V1_ROOT:
        assert limits["memory"] == "cgroup v1 per command"
    elif not AS_ROOT:
        assert limits["memory"] == "per process only"


TOTAL = {"memory_mb": 256, "memory_total_mb": 200, "cpu_seconds": 60}
# Four processes of 120 MB each: every one is under the 256 MB per-process limit, together they are not.
HOGS = "for i in 1 2 3 4; do python3 -c \"import time; x = b'x' * (120 * 1024 * 1024); time.sleep(60)\" & done; wait"


@pytest.mark.skipif(not V1_ROOT, reason="needs a cgroup per command: root on a cgroup-v1 host")
async def test_processes_over_the_total_memory_limit_are_stopped_while_other_chats_are_answered(
    tmp_path,
    model,  # noqa: F811
):
    settings = sandbox_settings(tmp_path, model, limits=TOTAL, command_timeout_seconds=40)
    async with Harness.running(settings) as h:
        hog = asyncio.create_task(h.chat.say(f"RUN: {HOGS}", chat="chat-hog"))
        await h.chat.wait_for_text("⏳ running", chat="chat-hog")
        await h.chat.say("hello?", chat="chat-other")
        await h.chat.wait_for_text("echo: hello?", chat="chat-other", timeout=15)
        await hog
        await h.idle(timeout=60)
        after = await run(h, "echo still here", chat="chat-hog")
    [result, *_] = results(model)
    assert "[stopped: the command used more than 200 MB of memory in total]" in result
    assert "ran longer than" not in result  # stopped by the limit, not by the 40 s timeout
    assert (
        "[stopped: the command used more than 200 MB of memory in total]"
        in h.chat.in_chat("chat-hog")[-2].text
    )
    assert after == "[exit code 0]\nstill here"


QUOTA = {"disk_mb": 50, "file_size_mb": 16}
QUOTA_STOP = "[stopped: this conversation's files grew past the 50 MB disk quota; delete files to free space]"


def thread_usage(tmp_path: Path) -> int:
    [workspace] = (tmp_path / "data" / "users").rglob("user-data/workspace")
    return sum(p.stat().st_blocks * 512 for p in workspace.rglob("*") if p.is_file())


async def test_a_conversation_cannot_write_past_its_disk_quota_but_can_free_space(tmp_path, model):  # noqa: F811
    settings = sandbox_settings(tmp_path, model, limits=QUOTA, command_timeout_seconds=120, approval="never")
    model.script(
        Reply(tool_calls=[ToolCall("write_file", {"path": "notes.txt", "content": "hello world"})]),
        # 10 GB in 10 MB files, each well under the 16 MB per-file limit.
        Reply(tool_calls=[ToolCall("bash", {"command": "for i in $(seq 1000); do head -c 10M /dev/zero > f$i; done"})]),
        # Over the quota now: the file tools refuse anything that grows the tree.
        Reply(tool_calls=[ToolCall("write_file", {"path": "other.txt", "content": "x" * 1000})]),
        Reply(tool_calls=[ToolCall("str_replace", {"path": "notes.txt", "old_str": "hello", "new_str": "hello there"})]),
        Reply(tool_calls=[ToolCall("write_file", {"path": "notes.txt", "content": " more", "append": True})]),
        # A command still runs (and is told), so it can delete files.
        Reply(tool_calls=[ToolCall("bash", {"command": "rm -f f*; echo freed"})]),
        Reply(tool_calls=[ToolCall("write_file", {"path": "other.txt", "content": "x" * 1000})]),
        # 40 MB in four files, then one file larger than the 10 MB that is left (but under 16 MB).
        Reply(tool_calls=[ToolCall("bash", {"command": "for f in a b c d; do head -c 10M /dev/zero > $f; done"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": "head -c 15M /dev/zero > e; echo after"})]),
        Reply(text="done"),
    )  # fmt: skip
    async with Harness.running(settings) as h:
        assert await h.ask("fill the disk") == "done"
    notes, flood, write, edit, append, freed, written, four, one_more = tool_results(model.completions[-1])
    assert "notes.txt" in notes
    assert QUOTA_STOP in flood
    refusal = "would take this conversation's files past the 50 MB disk quota"
    assert f"writing other.txt {refusal}" in write
    assert f"writing notes.txt {refusal}" in edit
    assert f"writing notes.txt {refusal}" in append
    assert freed.startswith("[exit code 0]\n[note: this conversation's files use ")
    assert "more than the 50 MB disk quota; files cannot grow until some are deleted]" in freed
    assert freed.rstrip().endswith("freed")
    assert "other.txt" in written and refusal not in written
    assert four == "[exit code 0]\n(no output)"
    assert QUOTA_STOP in one_more, one_more
    assert "past the 16 MB size limit" not in one_more
    assert thread_usage(tmp_path) <= 50 * 1024 * 1024
    [workspace] = (tmp_path / "data" / "users").rglob("user-data/workspace")
    assert (workspace / "notes.txt").read_text() == "hello world"
