"""The runner: pid 1 of a thread's long-lived bubblewrap sandbox, which starts each ``bash`` command in it.

Run by a Python inside the sandbox (never imported by the service)::

    python3 -I -S -B runner.py CONTROL_FD

Building the namespaces, about thirty mounts and a fresh ``/proc`` for every command cost 15–60 ms; this
process keeps one sandbox per thread and forks each command in it instead (``agent/sandbox_session.py``
is the service's side). It is bubblewrap's ``--as-pid-1``, so:

* a command cannot kill it: from inside its PID namespace, signals to pid 1 without a handler are
  dropped by the kernel, and the seccomp filter refuses ``ptrace``; it is not dumpable, so its memory,
  environment and descriptors under ``/proc/1`` are closed to the commands, which run as the same user;
* when it ends, for whatever reason, the kernel kills everything in the sandbox.

One command at a time (the service keeps another sandbox for a thread's concurrent commands). Each one:
the service sends ``run`` with the command line, its whole environment and working directory, and two
descriptors: the pipe for its output and a socket of its own. The forked child says hello on that socket
— the kernel attaches its pid as the service sees it (``SO_PASSCRED``), so the service can put it into
the command's cgroup — waits for "go" when asked to, and ``exec`` s the command in a session of its own.
A live process (``stdio``) comes with two more descriptors, its stdin and stdout; the output pipe is then
its stderr.
When the command's shell exits, everything else in the sandbox is killed (background jobs and anything
that left the session: the same as when a sandbox per command ended), the exit is reported, and
``/tmp``, ``/var/tmp`` and ``/dev/shm`` are emptied before the next command is read.

Frames both ways are a 4-byte big-endian length and a JSON object. This file runs on the sandbox's
Python (3.8 or later) with no site packages; it imports only the standard library.
"""

import contextlib
import json
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import time

#: Emptied after every command: the guide promises a /tmp of each command's own.
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
#: How long the runner waits for a killed command's processes to be gone before it reads on.
SETTLE_SECONDS = 5.0
MAX_FDS = 8
HEADER = struct.Struct(">I")
PR_SET_DUMPABLE = 4


def not_dumpable() -> None:
    """No ``/proc/1/mem``, ``environ`` or ``fd`` for processes of the same user (the commands)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def exit_code(status: int) -> int:
    """The shell's exit status the way bubblewrap reported it: 128 + N for a signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def remove_tree(path: str) -> None:
    """Delete ``path`` and what is in it, giving directories back the permissions a command took."""
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        try:
            os.chmod(path, 0o700)
            for entry in os.listdir(path):
                remove_tree(os.path.join(path, entry))
            os.rmdir(path)
        except OSError:
            pass
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def empty_scratch() -> None:
    for directory in SCRATCH:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for entry in entries:
            remove_tree(os.path.join(directory, entry))


def start_child(request: dict, out_fd: int, hello_fd: int) -> None:
    """In the forked child: become the command (never returns)."""
    try:
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)
        os.setsid()
        stdio = request.get("stdio_fds")
        if stdio:  # a live process: its stdin and stdout are the service's pipes, the output pipe stderr
            os.dup2(stdio[0], 0)
            os.dup2(stdio[1], 1)
        else:
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        hello = socket.socket(fileno=hello_fd)
        hello.send(b"r")
        if request.get("hold"):
            answer = hello.recv(1)
            if answer != b"g":
                os.write(2, b"the command could not be put into its cgroup; it did not run\n")
                os._exit(126)
        hello.close()
        # Soft and hard together (as ``ulimit`` without -S), so the command cannot raise them again. Here,
        # inside the sandbox's user namespace, and never on bubblewrap: the kernel (5.14+) counts
        # RLIMIT_NPROC per user namespace, so a fork bomb fills this sandbox's count only. Set before the
        # namespace existed, it would cap every process of the service's uid (docs/sandbox.md, "Limits").
        for name, (soft, hard) in request.get("limits", {}).items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        os.chdir(request["cwd"])
        os.execve(request["argv"][0], request["argv"], request["env"])
    except BaseException as exc:
        try:
            os.write(2, (f"the sandbox could not start the command: {exc}\n").encode())
        finally:
            os._exit(127)


class Runner:
    def __init__(self, control: socket.socket, wakeup: int) -> None:
        self.control = control
        self.wakeup = wakeup
        self.buffer = b""
        self.fds: list = []
        self.child = 0

    def send(self, message: dict) -> None:
        data = json.dumps(message).encode()
        self.control.sendall(HEADER.pack(len(data)) + data)

    def serve(self) -> None:
        self.send({"op": "ready"})
        while True:
            ready, _, _ = select.select([self.control.fileno(), self.wakeup], [], [])
            if self.wakeup in ready:
                try:
                    while os.read(self.wakeup, 512):
                        pass
                except BlockingIOError:
                    pass
                self.reap()
            if self.control.fileno() in ready and not self.receive():
                return

    def receive(self) -> bool:
        """Read what the service sent; False when it is gone (the sandbox then ends)."""
        try:
            data, ancillary, _, _ = self.control.recvmsg(
                1 << 16, socket.CMSG_SPACE(MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC
            )
        except InterruptedError:
            return True
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                self.fds.extend(struct.unpack(f"{usable // 4}i", payload[:usable]))
        if not data:
            return False
        self.buffer += data
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if len(self.buffer) < HEADER.size + size:
                break
            frame = json.loads(self.buffer[HEADER.size : HEADER.size + size])
            self.buffer = self.buffer[HEADER.size + size :]
            self.handle(frame)
        return True

    def handle(self, frame: dict) -> None:
        if frame["op"] == "run":
            count = 4 if frame.get("stdio") else 2
            fds = self.fds[:count]
            del self.fds[:count]
            out_fd, hello_fd = fds[0], fds[1]
            frame["stdio_fds"] = fds[2:]
            if self.child:
                for fd in fds:
                    os.close(fd)
                self.send({"op": "error", "message": "a command is already running"})
                return
            pid = os.fork()
            if pid == 0:
                start_child(frame, out_fd, hello_fd)
            for fd in fds:
                os.close(fd)
            self.child = pid
        elif frame["op"] == "kill" and self.child:
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(OSError):
                    kill(self.child, signal.SIGKILL)
            self.kill_rest()

    def kill_rest(self) -> None:
        """SIGKILL every process in the sandbox but this one (``kill(-1)`` spares the caller and pid 1)."""
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.finished(status)

    def finished(self, status: int) -> None:
        """The command's shell exited: end what it left behind, report, and make the sandbox as new."""
        self.child = 0
        self.kill_rest()
        self.send({"op": "exit", "code": exit_code(status)})
        deadline = time.monotonic() + SETTLE_SECONDS
        pause = 0.0005
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                self.kill_rest()  # one forked while the last kill went round
                time.sleep(pause)
                pause = min(pause * 2, 0.02)
        empty_scratch()


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    os.set_inheritable(control.fileno(), False)
    not_dumpable()
    # Pid 1 ignores what it has no handler for when it comes from inside: give SIGINT, which Python turns
    # into KeyboardInterrupt, no handler at all.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda number, frame: None)
    try:
        Runner(control, wakeup_read).serve()
    except (BrokenPipeError, ConnectionError):
        pass
    finally:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)


if __name__ == "__main__":
    main()
