"""A capture server for the official `kubernetes` client: a plain HTTP server on 127.0.0.1 that records every
request the client really sends (method, path, query, headers, JSON body) and answers from a route table.

There is no API server here; this is what a real one would receive over the wire. Routes map
(METHOD, path regex) to (status, JSON payload) or to a callable (path, body) -> (status, payload);
anything else answers 404 with a Status object.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from kubernetes import client as k8s


class Capture:
    def __init__(self, routes: dict) -> None:
        self.routes = routes
        self.sent: list[dict] = []
        self.lock = threading.Lock()

    def answer(self, method: str, path: str, body):
        for (m, pattern), ans in list(self.routes.items()):
            if m == method and re.fullmatch(pattern, path):
                return ans(path, body) if callable(ans) else ans
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}


def _handler(cap: Capture):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self):
            url = urlsplit(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            body = json.loads(raw) if raw else None
            with cap.lock:
                cap.sent.append({"method": self.command, "path": url.path, "query": url.query, "body": body,
                                 "headers": {k.lower(): v for k, v in self.headers.items()}})
            status, payload = cap.answer(self.command, url.path, body)
            out = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            try:
                self.wfile.write(out)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a timeout test)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        def log_message(self, *args):
            pass

    return H


@contextlib.contextmanager
def capture_server(routes: dict, timeout_s: float | None = None):
    """Yields (api_client, capture): an official-client ApiClient pointed at the server, and its record.
    With `timeout_s`, the daemon's TimedApiClient (the one `api_client()` builds) with that timeout."""
    from daemon.actuators.k8s.actuator import TimedApiClient

    cap = Capture(routes)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(cap))
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    cfg = k8s.Configuration(host=f"http://127.0.0.1:{srv.server_address[1]}")
    api = k8s.ApiClient(cfg) if timeout_s is None else TimedApiClient(cfg, timeout_s)
    try:
        yield api, cap
    finally:
        srv.shutdown()
        srv.server_close()
        api.close()
