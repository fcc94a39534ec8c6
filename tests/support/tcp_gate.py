"""A TCP gate in front of a real server: a daemon's kubeconfig points at the gate, and the test opens or closes it,
so the real API server is cut off from that daemon (connection refused) and comes back, while the control plane
the other tests share keeps running. Bytes pass through untouched (TLS is end to end: the apiserver's certificate
names 127.0.0.1, whatever the port)."""

from __future__ import annotations

import socket
import threading


class TcpGate:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> "TcpGate":
        lst = socket.socket()
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", self.port))
        lst.listen(64)
        self._listener = lst
        threading.Thread(target=self._accept, args=(lst,), daemon=True).start()
        return self

    def close(self) -> None:
        """Refuse new connections and cut the open ones (a client's pooled connection fails at once)."""
        lst, self._listener = self._listener, None
        if lst is not None:
            try:
                lst.shutdown(socket.SHUT_RDWR)   # wakes the accept() blocked on it (close alone does not)
            except OSError:
                pass
            lst.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, lst: socket.socket) -> None:
        while True:
            try:
                down, _ = lst.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                down.close()
                continue
            up.settimeout(None)
            with self._lock:
                self._conns += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
