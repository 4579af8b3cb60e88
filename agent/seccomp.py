"""A seccomp filter for sandboxed commands, built as a classic BPF program in pure Python.

Why a filter at all: the namespaces bubblewrap builds keep a command away from the host's files and
processes, but every system call still reaches the shared kernel. A handful of calls are either never
needed by a shell, a compiler or a package manager, or are the usual first step of a kernel exploit
(new user namespaces, BPF, keyrings, userfaultfd, io_uring, ptrace of a neighbour). Refusing them with
``EPERM`` shrinks what a command can poke at, the way Docker's and Flatpak's default profiles do.

Why not libseccomp: it is a C library the service would need bindings for; the program here is short,
and bubblewrap loads a ready-made one from a file descriptor (``bwrap --seccomp FD``), so building the
bytes ourselves keeps the sandbox dependency-free.

The program checks ``seccomp_data.arch`` first: only the machine's native ABI is allowed through (a
64-bit process can still make 32-bit system calls — ``int 0x80`` on x86_64, AArch32 on arm64 — and those
have other numbers, so they would slip past a list written for the native ones); a call from any other
ABI kills the process (``Bad system call``). On x86_64 the x32 ABI (numbers with bit 30 set) is killed
the same way. On an architecture this module has no table for, :func:`filter_program` returns ``None``
and the sandbox runs without a filter (start-up logs a warning and ``/health`` says so).
"""

from __future__ import annotations

import errno
import os
import platform
import struct
from dataclasses import dataclass

# Classic BPF opcodes (linux/bpf_common.h, linux/filter.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

# Return actions (linux/seccomp.h).
RET_ALLOW = 0x7FFF_0000
RET_KILL_PROCESS = 0x8000_0000
RET_ERRNO = 0x0005_0000

# Offsets in struct seccomp_data {int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6];}.
# Both supported machines are little-endian, so the low 32 bits of args[0] are at offset 16.
_NR, _ARCH, _ARG0_LOW = 0, 4, 16

#: Every namespace flag of clone()/unshare(): CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
#: NEWPID, NEWNET. An ordinary user can only create a user namespace (and, inside it, every other
#: kind); the others need capabilities the sandbox never has — refusing them all keeps the rule simple.
NAMESPACE_FLAGS = 0x0000_0080 | 0x0002_0000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000
NAMESPACE_FLAGS |= 0x2000_0000 | 0x4000_0000

#: personality() values allowed through: the default Linux one (and its 32-bit and ``uname26``
#: variants) and ``0xffffffff``, which only reads the current value. Everything else — notably
#: ``ADDR_NO_RANDOMIZE``, which turns off address-space randomisation — is refused.
ALLOWED_PERSONALITIES = (0x0, 0x8, 0x2_0000, 0x2_0008, 0xFFFF_FFFF)

#: What is refused with EPERM, and why (also the table in docs/sandbox.md).
DENIED = {
    # Kernel keyrings: not namespaced; a frequent source of kernel bugs.
    "keyctl": "kernel keyrings",
    "add_key": "kernel keyrings",
    "request_key": "kernel keyrings",
    # eBPF and perf: large kernel attack surface, nothing a command here needs.
    "bpf": "eBPF programs",
    "perf_event_open": "performance counters",
    # Reading or steering other processes' memory.
    "ptrace": "tracing processes",
    "process_vm_readv": "reading another process's memory",
    "process_vm_writev": "writing another process's memory",
    "kcmp": "comparing other processes' kernel state",
    # Mounts: the sandbox's file tree is fixed by bubblewrap.
    "mount": "mounting",
    "umount2": "unmounting",
    "pivot_root": "changing the root",
    "move_mount": "mounting (new API)",
    "open_tree": "mounting (new API)",
    "fsopen": "mounting (new API)",
    "fsmount": "mounting (new API)",
    "fsconfig": "mounting (new API)",
    "fspick": "mounting (new API)",
    "mount_setattr": "mounting (new API)",
    # Classic exploit helpers.
    "userfaultfd": "stalling kernel page faults (exploit primitive)",
    "io_uring_setup": "io_uring (a large, often-vulnerable kernel interface)",
    "io_uring_enter": "io_uring",
    "io_uring_register": "io_uring",
    # Whole-machine operations.
    "kexec_load": "replacing the kernel",
    "kexec_file_load": "replacing the kernel",
    "init_module": "loading kernel modules",
    "finit_module": "loading kernel modules",
    "delete_module": "unloading kernel modules",
    "swapon": "swap",
    "swapoff": "swap",
    "reboot": "rebooting",
    "acct": "process accounting",
    "quotactl": "disk quotas",
    "quotactl_fd": "disk quotas",
    "syslog": "the kernel log",
    "lookup_dcookie": "kernel profiling",
    # File handles bypass the mount tree (the classic container escape).
    "open_by_handle_at": "opening files by handle (escapes bind mounts)",
    "name_to_handle_at": "file handles",
    # Joining other namespaces.
    "setns": "joining namespaces",
}


@dataclass(frozen=True, slots=True)
class Arch:
    """One machine's ABI: its ``AUDIT_ARCH_*`` value and system call numbers."""

    name: str
    audit_arch: int
    numbers: dict[str, int]
    #: Numbers at or above this belong to another ABI on the same arch value (x32 on x86_64).
    foreign_from: int | None = None


# fmt: off
_X86_64_NUMBERS = {
    "ptrace": 101, "syslog": 103, "personality": 135, "acct": 163, "mount": 165, "umount2": 166,
    "pivot_root": 155, "swapon": 167, "swapoff": 168, "reboot": 169, "init_module": 175,
    "delete_module": 176, "finit_module": 313, "quotactl": 179, "quotactl_fd": 443, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "setns": 308, "clone": 56, "clone3": 435,
    "kexec_load": 246, "kexec_file_load": 320, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "kcmp": 312, "lookup_dcookie": 212,
}
_AARCH64_NUMBERS = {
    "ptrace": 117, "syslog": 116, "personality": 92, "acct": 89, "mount": 40, "umount2": 39,
    "pivot_root": 41, "swapon": 224, "swapoff": 225, "reboot": 142, "init_module": 105,
    "delete_module": 106, "finit_module": 273, "quotactl": 60, "quotactl_fd": 443, "add_key": 217,
    "request_key": 218, "keyctl": 219, "unshare": 97, "setns": 268, "clone": 220, "clone3": 435,
    "kexec_load": 104, "kexec_file_load": 294, "perf_event_open": 241, "name_to_handle_at": 264,
    "open_by_handle_at": 265, "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280,
    "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "kcmp": 272, "lookup_dcookie": 18,
}
# fmt: on
X86_64 = Arch("x86_64", 0xC000_003E, _X86_64_NUMBERS, foreign_from=0x4000_0000)  # __X32_SYSCALL_BIT
AARCH64 = Arch("aarch64", 0xC000_00B7, _AARCH64_NUMBERS)
ARCHES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


def native_arch() -> Arch | None:
    """The running machine's ABI, or ``None`` when this module has no system call table for it."""
    return ARCHES.get(platform.machine().lower())


class _Assembler:
    """Just enough of an assembler for a straight-line filter: instructions with jumps to labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, value: int, if_true: str | int, if_false: str | int = 0) -> None:
        self.code.append((op, if_true, if_false, value))

    def ret(self, action: int) -> None:
        self.code.append((_RET_K, 0, 0, action))

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (op, jt, jf, k) in enumerate(self.code):
            out += struct.pack("<HBBI", op, self._offset(index, jt), self._offset(index, jf), k)
        return bytes(out)

    def _offset(self, index: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        distance = self.labels[target] - index - 1
        if not 0 <= distance <= 255:
            raise ValueError(f"seccomp jump to {target} out of range ({distance})")
        return distance


def filter_program(arch: Arch) -> bytes:
    """The filter as bwrap reads it from ``--seccomp FD``: an array of ``struct sock_filter``."""
    asm = _Assembler()
    asm.load(_ARCH)
    asm.jump(_JEQ_K, arch.audit_arch, "native", "kill")
    asm.label("native")
    asm.load(_NR)
    if arch.foreign_from is not None:
        asm.jump(_JGE_K, arch.foreign_from, "kill")
    for name in DENIED:
        asm.jump(_JEQ_K, arch.numbers[name], "eperm")
    # clone3 passes its flags in a struct the filter cannot read: make it "not implemented", and the
    # C library falls back to clone(), whose flags it can.
    asm.jump(_JEQ_K, arch.numbers["clone3"], "enosys")
    asm.jump(_JEQ_K, arch.numbers["clone"], "namespace_flags")
    asm.jump(_JEQ_K, arch.numbers["unshare"], "namespace_flags")
    asm.jump(_JEQ_K, arch.numbers["personality"], "personality")
    asm.ret(RET_ALLOW)
    asm.label("namespace_flags")
    # Only the low 32 bits count: clone() drops the rest, unshare() refuses unknown high bits itself.
    asm.load(_ARG0_LOW)
    asm.jump(_JSET_K, NAMESPACE_FLAGS, "eperm")
    asm.ret(RET_ALLOW)
    asm.label("personality")
    asm.load(_ARG0_LOW)  # personality() takes an unsigned int
    for value in ALLOWED_PERSONALITIES:
        asm.jump(_JEQ_K, value, "allow")
    asm.label("eperm")
    asm.ret(RET_ERRNO | errno.EPERM)
    asm.label("allow")
    asm.ret(RET_ALLOW)
    asm.label("enosys")
    asm.ret(RET_ERRNO | errno.ENOSYS)
    asm.label("kill")
    asm.ret(RET_KILL_PROCESS)
    return asm.assemble()


def program_fd(program: bytes) -> int:
    """A fresh file descriptor positioned at the start of ``program``, for one ``bwrap --seccomp``.

    Each command needs its own: bubblewrap reads the descriptor to its end, and descriptors passed to
    a child share their read position with the parent's copy. The caller closes it once bwrap started.
    """
    fd = os.memfd_create("switchboard-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


__all__ = ["AARCH64", "DENIED", "X86_64", "Arch", "filter_program", "native_arch", "program_fd"]
