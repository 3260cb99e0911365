"""A loopback TCP proxy a test can cut and restore: a process's link to Redis, and nothing else.

Cut, it closes every open connection and every connection it accepts (the client's call fails
at once with a closed connection, as after a network reset); frozen, it keeps connections open
but forwards nothing (the client's call times out, as behind a dropped route); restored, it
forwards again.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``(host, target_port)`` from daemon threads."""

    def __init__(self, host: str, target_port: int) -> None:
        self._target = (host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._cut = False
        self._closed = False
        self._flowing = threading.Event()
        self._flowing.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets, self._open = self._open, []
        for sock in sockets:
            _close(sock)

    def freeze(self) -> None:
        self._flowing.clear()

    def restore(self) -> None:
        with self._lock:
            self._cut = False
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
                upstream.settimeout(None)  # idle connections stay open, as without the proxy
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open += [client, upstream]
            for source, sink, from_client in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, sink, from_client), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                if not self.forward(data, from_client, sink):
                    break
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)

    def forward(self, data: bytes, from_client: bool, sink: socket.socket) -> bool:
        """Send ``data`` on; ``False`` ends the connection (a subclass may drop or cut)."""
        sink.sendall(data)
        return True


_COMMIT = re.compile(rb"(?i)(?<![a-z_])COMMIT(\x00|;|$)")
"""The COMMIT statement as PostgreSQL's simple query and MySQL's COM_QUERY carry it (not the
word inside ``SET AUTOCOMMIT``)."""


class CommitCutter(TcpProxy):
    """A proxy to a SQL server that, once armed, cuts the connection of the next ``COMMIT``:
    after the server got it, so the server commits and the client never hears it
    (``reply_lost``), or before (``before_commit``: the server rolls the transaction back).
    Either way the client sees a connection lost during its commit."""

    def __init__(self, host: str, target_port: int) -> None:
        super().__init__(host, target_port)
        self._armed: str | None = None
        self._muted: set[int] = set()
        self.cuts = 0

    def arm(self, mode: str) -> None:
        assert mode in ("reply_lost", "before_commit")
        self._armed = mode

    def forward(self, data: bytes, from_client: bool, sink: socket.socket) -> bool:
        if not from_client:
            if id(sink) in self._muted:
                return True  # the server's answers to this client are lost
            sink.sendall(data)
            return True
        mode = self._armed
        if mode is None or not _COMMIT.search(data):
            sink.sendall(data)
            return True
        self._armed = None
        self.cuts += 1
        if mode == "reply_lost":
            client = self._peer_of(sink)
            if client is not None:
                self._muted.add(id(client))
            sink.sendall(data)
            time.sleep(0.5)  # the server commits; its reply goes nowhere
        return False

    def _peer_of(self, upstream: socket.socket) -> socket.socket | None:
        with self._lock:
            for index, sock in enumerate(self._open):
                if sock is upstream and index > 0:
                    return self._open[index - 1]
        return None


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
