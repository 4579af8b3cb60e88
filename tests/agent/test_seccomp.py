"""The seccomp program's decisions for both machines it has tables for.

x86_64 runs for real in ``test_hardening.py``; aarch64 cannot run here, so this reads each program the
way the kernel does (classic BPF over ``struct seccomp_data``) and checks what it answers.
"""

from __future__ import annotations

import errno
import struct

import pytest

from agent.seccomp import AARCH64, RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS, X86_64, Arch, filter_program

CLONE_THREAD_FLAGS = 0x003D0F00  # what pthread_create passes
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
GETPID = {"x86_64": 39, "aarch64": 172}


def decide(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """Run a classic BPF seccomp program over one system call, as the kernel's interpreter would."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    code = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif op == 0x06:  # ret k
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: acc & k != 0}[op]
            pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("arch", [X86_64, AARCH64], ids=lambda a: a.name)
def test_the_filter_refuses_the_listed_calls_and_lets_everything_else_through(arch: Arch):
    program = filter_program(arch)
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS

    def call(name: str, arg0: int = 0) -> int:
        return decide(program, arch.audit_arch, arch.numbers[name], arg0)

    for name in ("keyctl", "bpf", "ptrace", "mount", "userfaultfd", "io_uring_setup", "setns"):
        assert call(name) == eperm, name
    assert decide(program, arch.audit_arch, GETPID[arch.name]) == RET_ALLOW
    assert call("clone", CLONE_THREAD_FLAGS) == RET_ALLOW
    assert call("clone", CLONE_THREAD_FLAGS | CLONE_NEWUSER) == eperm
    assert call("unshare", CLONE_NEWUSER) == eperm
    assert call("unshare", CLONE_NEWNET) == eperm
    assert call("unshare", 0x400) == RET_ALLOW  # CLONE_FILES: no namespace
    assert call("clone3") == enosys
    assert call("personality", 0xFFFFFFFF) == RET_ALLOW
    assert call("personality", 0x0040000) == eperm  # ADDR_NO_RANDOMIZE
    # Another ABI on the same machine (32-bit calls) is killed, whatever the number means there.
    other = AARCH64 if arch is X86_64 else X86_64
    assert decide(program, other.audit_arch, GETPID[arch.name]) == RET_KILL_PROCESS


def test_x32_system_calls_on_x86_64_are_killed():
    program = filter_program(X86_64)
    assert decide(program, X86_64.audit_arch, 0x4000_0000 | 250) == RET_KILL_PROCESS  # x32 keyctl
