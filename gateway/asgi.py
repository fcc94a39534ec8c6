"""Small ASGI helpers the gateway's parts share: a request header, a JSON answer, and reading a body."""

from __future__ import annotations

import json
from typing import Awaitable, Callable


def header(scope: dict, name: bytes) -> str | None:
    for k, v in scope.get("headers", []):
        if k == name:
            return v.decode("latin-1")
    return None


async def reply_json(send: Callable, status: int, body: dict, headers: list) -> None:
    """A small JSON answer (errors, refusals) with its length."""
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": data})


async def stream_body(receive: Callable[[], Awaitable]):
    """The request body as it arrives (for httpx to send upstream)."""
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return
        if msg.get("body"):
            yield msg["body"]
        if not msg.get("more_body"):
            return


async def read_body(receive: Callable[[], Awaitable]) -> bytes:
    """The whole request body (the proxy forwards it in one piece)."""
    chunks = []
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            break
    return b"".join(chunks)


async def peek_body(receive: Callable[[], Awaitable], limit: int) -> tuple[bytes | None, Callable[[], Awaitable]]:
    """Read the request body up to `limit` bytes: (the body, or None when it is longer, and a `receive` that
    gives the app everything from the start). A long body is never held whole: past `limit` the app's reads
    go straight to the client again."""
    held: list[dict] = []
    size, complete = 0, False
    while size <= limit:
        msg = await receive()
        held.append(msg)
        if msg["type"] != "http.request":
            break
        size += len(msg.get("body", b""))
        if not msg.get("more_body"):
            complete = True
            break
    body = b"".join(m.get("body", b"") for m in held) if complete and size <= limit else None

    async def replay():
        return held.pop(0) if held else await receive()

    return body, replay
