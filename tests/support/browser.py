"""A headless Chromium (the Debian package) driven over the DevTools protocol, for the console's tests.

Small on purpose: start the browser, open a page, wait for its load event, evaluate
JavaScript, read the HTTP status of the document and every URL the page asked for,
and save a full-page screenshot. The transport is `websocket-client`.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import websocket

from tests.conftest import need_binary


class BrowserError(RuntimeError):
    pass


class Page:
    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.events: list[dict] = []
        for domain in ("Page", "Network", "Runtime"):
            self.send(f"{domain}.enable")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()

    def send(self, method: str, params: dict | None = None, timeout: float = 30.0) -> dict:
        with self._lock:
            i = next(self._ids)
            self.ws.send(json.dumps({"id": i, "method": method, "params": params or {}}))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = json.loads(self.ws.recv())
                if msg.get("id") == i:
                    if "error" in msg:
                        raise BrowserError(f"{method}: {msg['error']}")
                    return msg.get("result", {})
                if "method" in msg:
                    self.events.append(msg)
        raise BrowserError(f"{method}: no answer in {timeout}s")

    def _wait_event(self, name: str, since: int, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.events[since:]:
                if ev["method"] == name:
                    return ev
            with self._lock:
                self.ws.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    self.events.append(json.loads(self.ws.recv()))
                except websocket.WebSocketTimeoutException:
                    pass
                finally:
                    self.ws.settimeout(30)
        raise BrowserError(f"no {name} within {timeout}s")

    def goto(self, url: str, timeout: float = 30.0) -> int:
        """Open url (following redirects) and wait for the load event; the final document's HTTP status."""
        mark = len(self.events)
        res = self.send("Page.navigate", {"url": url})
        if res.get("errorText"):
            raise BrowserError(f"{url}: {res['errorText']}")
        self._wait_event("Page.loadEventFired", mark, timeout)
        return self.document_status(mark)

    def document_status(self, since: int = 0) -> int:
        docs = [e for e in self.events[since:] if e["method"] == "Network.responseReceived"
                and e["params"].get("type") == "Document"]
        if not docs:
            raise BrowserError("no document response seen")
        return int(docs[-1]["params"]["response"]["status"])

    def submit(self, form_selector: str, fields: dict[str, str], timeout: float = 30.0) -> int:
        """Fill a form's fields and submit it like a user would; the status of the page it leads to."""
        mark = len(self.events)
        js = "".join(f"document.querySelector({json.dumps(form_selector + ' [name=' + k + ']')}).value = "
                     f"{json.dumps(v)};" for k, v in fields.items())
        self.eval(js + f"document.querySelector({json.dumps(form_selector)}).requestSubmit(); true")
        self._wait_event("Page.loadEventFired", mark, timeout)
        return self.document_status(mark)

    def eval(self, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression[:80]}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: Path) -> Path:
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": size["width"],
                                                             "height": size["height"], "scale": 1}})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


def logged_in(new_page, base: str, token: str) -> Page:
    """A new page logged in to the console at `base` with `token` (through its login form)."""
    page = new_page()
    page.goto(f"{base}/ui/login")
    assert page.submit("form[action='/ui/login']", {"token": token}) == 200
    return page


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 900):
    """A fresh headless Chromium with its own profile; yields a function that opens a new Page."""
    exe = need_binary("chromium")
    profile = Path(tempfile.mkdtemp(prefix="gpuas-chromium-"))
    proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                             "--disable-background-networking", "--disable-sync", "--hide-scrollbars",
                             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pages: list[Page] = []
    try:
        ws = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ws is None:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise BrowserError(f"chromium exited with {proc.returncode}")
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                ws = m.group(1)
        if ws is None:
            raise BrowserError("chromium did not open its DevTools port")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        port = int(re.match(r"ws://[^:]+:(\d+)/", ws).group(1))
        import httpx

        def new_page() -> Page:
            target = httpx.put(f"http://127.0.0.1:{port}/json/new?about:blank", timeout=10).json()
            p = Page(target["webSocketDebuggerUrl"])
            p.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                          "deviceScaleFactor": 1, "mobile": False})
            pages.append(p)
            return p

        yield new_page
    finally:
        for p in pages:
            p.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
