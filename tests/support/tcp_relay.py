"""A TCP relay on 127.0.0.1 in front of a real server, that a test can cut and restore: every connection through
it is closed at once, and no new one is accepted until restored. It stands for a network path that breaks (the
apiserver's watch connections drop), with the real server behind it untouched."""

from __future__ import annotations

import socket
import threading
import time

from tests.conftest import free_port


class TcpRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> "TcpRelay":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(16)
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()
        return self

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Refuse new connections and close every open one (both ends)."""
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept thread, which lets the port go
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self, timeout: float = 10.0) -> None:
        """Accept again, on the same port (once the cut listener has let it go)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.start()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
