"""Minimal ASGI plumbing: the gateway's invoke app and every component's ``/metrics`` app.

The apps are raw ASGI callables rather than a framework's: the gateway's invoke path needs
exact control of when the body is read (never past 1 MiB) and of client-disconnect
detection, and the only other routes are ``/healthz`` and ``/metrics``
(:mod:`krt.metrics_server`). hypercorn on trio sends ``lifespan`` events
and waits for their answers (DESIGN.md, "Dependency notes"), so every app answers them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: An ASGI application.
App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def answer_lifespan(receive: Receive, send: Send) -> None:
    """Answer ``lifespan.startup`` and ``lifespan.shutdown`` until the latter arrives."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def send_response(
    send: Send,
    status: int,
    body: bytes,
    headers: Sequence[tuple[str, str]],
    *,
    before_end: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Send a complete response: ``status``, ``headers`` (str pairs) and ``body``.

    A ``content-length`` header is added, so the client has the whole response once ``body``
    arrives. ``before_end``, if given, runs after the body is sent but before the response
    is ended: hypercorn closes a connection whose request body is unread as soon as the
    response ends, so this is where the rest of a rejected body is discarded.
    """
    raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    if before_end is None:
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.body", "body": body, "more_body": True})
    await before_end()
    await send({"type": "http.response.body", "body": b""})
