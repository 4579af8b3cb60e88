"""The relay inside a sandbox: ``127.0.0.1:PORT`` → the service's egress proxy on a bound unix socket.

Run by the host's own Python inside bubblewrap (never imported by the service)::

    python -I -S -B egress_relay.py PORT SOCKET               # hold: say "ready", relay until stdin closes
    python -I -S -B egress_relay.py PORT SOCKET COMMAND [ARG…]  # relay for COMMAND, which it becomes

A sandbox has a network namespace of its own, so the only way out is the unix socket that the service
bound in; tools such as ``pip``, ``curl`` and ``git`` only speak to a proxy over TCP, hence this relay.
It binds its port *first*, then forks: the child relays. The parent either reports ``ready`` and waits
for its stdin to close (the ``bash`` sandbox: one holder per turn, whose namespace each command joins),
or ``exec``s the command (an MCP server: the port is listening before its first instruction, and it
keeps this process's pid, exit status and signals). The relay needs no trust: it only forwards bytes
to the proxy, which decides about every connection.

Only ``_socket`` is imported before the port listens — the public ``socket`` module costs ~10 ms to
import. The relay imports what it needs after the fork.
"""

from __future__ import annotations

import _signal
import _socket
import os
import sys

TYPE_CHECKING = False  # typing itself costs an import before the exec
if TYPE_CHECKING:
    import socket

#: Bytes buffered per direction before the relay stops reading from the sending side.
HIGH_WATER = 256 * 1024


def main() -> None:
    port, path, command = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    if os.fork() == 0:
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):  # never hold the command's output pipe open
            os.dup2(null, fd)
        try:
            Relay(listener.detach(), path).run()
        finally:
            os._exit(0)
    listener.close()
    if not command:
        os.write(1, b"ready\n")
        while os.read(0, 4096):
            pass
        return
    # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec: put both back,
    # or `yes | head` would complain and a file past the size limit would not stop the command.
    for number in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(number, _signal.SIG_DFL)
    os.execv(command[0], command)


class End:
    """One socket of a relayed pair, and the bytes waiting to be written to it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.peer: End = self
        self.pending = bytearray()
        self.read_done = False
        self.closed = False


class Relay:
    """Accepts forever; each connection gets its own connection to the proxy's unix socket."""

    def __init__(self, fd: int, path: str) -> None:
        import selectors
        import socket

        self.selectors = selectors
        self.socket = socket
        self.path = path
        self.server = socket.socket(fileno=fd)
        self.server.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server, selectors.EVENT_READ, None)

    def run(self) -> None:
        while True:
            for key, mask in self.selector.select():
                if key.data is None:
                    self.accept()
                else:
                    self.transfer(key.data, mask)

    def accept(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        upstream = self.socket.socket(self.socket.AF_UNIX, self.socket.SOCK_STREAM)
        try:
            upstream.connect(self.path)
        except OSError:
            conn.close()
            upstream.close()
            return
        conn.setblocking(False)
        upstream.setblocking(False)
        near, far = End(conn), End(upstream)
        near.peer, far.peer = far, near
        self.watch(near)
        self.watch(far)

    def transfer(self, end: End, mask: int) -> None:
        if end.closed:
            return
        try:
            if mask & self.selectors.EVENT_WRITE and end.pending:
                sent = end.sock.send(end.pending)
                del end.pending[:sent]
                if not end.pending and end.peer.read_done:
                    end.sock.shutdown(self.socket.SHUT_WR)
            if mask & self.selectors.EVENT_READ:
                data = end.sock.recv(65536)
                if data:
                    end.peer.pending += data
                else:
                    end.read_done = True
                    if not end.peer.pending:
                        end.peer.sock.shutdown(self.socket.SHUT_WR)
        except BlockingIOError:
            pass
        except OSError:
            self.close(end)
            return
        if end.read_done and end.peer.read_done and not end.pending and not end.peer.pending:
            self.close(end)
            return
        self.watch(end)
        self.watch(end.peer)

    def watch(self, end: End) -> None:
        """Read while the peer's buffer has room and this side has not ended; write while bytes wait."""
        events = 0
        if not end.read_done and len(end.peer.pending) < HIGH_WATER:
            events |= self.selectors.EVENT_READ
        if end.pending:
            events |= self.selectors.EVENT_WRITE
        known = end.sock in self.selector.get_map()
        if events and known:
            self.selector.modify(end.sock, events, end)
        elif events:
            self.selector.register(end.sock, events, end)
        elif known:
            self.selector.unregister(end.sock)

    def close(self, end: End) -> None:
        for side in (end, end.peer):
            if not side.closed:
                side.closed = True
                if side.sock in self.selector.get_map():
                    self.selector.unregister(side.sock)
                side.sock.close()


if __name__ == "__main__":
    main()
