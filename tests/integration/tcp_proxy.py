"""A loopback TCP proxy a test can cut and restore: a process's link to Redis, and nothing else.

Cut, it closes every open connection and every connection it accepts (the client's call fails
at once with a closed connection, as after a network reset); frozen, it keeps connections open
but forwards nothing (the client's call times out, as behind a dropped route); restored, it
forwards again.
"""

from __future__ import annotations

import contextlib
import socket
import threading


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
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
