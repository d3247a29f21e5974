"""The ``localkube/tcp-echo`` test image: a TCP echo server for node and Service tests.

Listens on ``$POD_IP:$PORT``; ``POD_IP`` defaults to ``$KRT_POD_IP`` (the Pod's own
address, set by localkube in every container) and then ``127.0.0.1``, ``PORT`` to 8080.
Each connection first receives one line ``<POD_NAME>\\n`` (default ``$HOSTNAME``, the Pod
name, so a test can tell which Pod answered through a Service), then
every byte it sends is echoed back. On SIGTERM it prints ``SIGTERM received`` and exits 0,
unless ``ECHO_IGNORE_SIGTERM=1``, in which case it keeps serving (to test the SIGKILL after
``terminationGracePeriodSeconds``). Standard library only, so it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from types import FrameType


def _serve_connection(conn: socket.socket, greeting: bytes) -> None:
    with conn:
        try:
            conn.sendall(greeting)
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            return


def main() -> None:
    """Run the echo server until SIGTERM (or forever with ``ECHO_IGNORE_SIGTERM=1``)."""
    host = os.environ.get("POD_IP") or os.environ.get("KRT_POD_IP") or "127.0.0.1"
    port = int(os.environ.get("PORT", "8080"))
    name = os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or "tcp-echo"
    greeting = (name + "\n").encode()

    def on_term(signum: int, frame: FrameType | None) -> None:
        print("SIGTERM received", flush=True)
        if os.environ.get("ECHO_IGNORE_SIGTERM") != "1":
            sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    server = socket.create_server((host, port), reuse_port=False)
    print(f"listening on {host}:{port}", flush=True)
    while True:
        conn, _ = server.accept()
        # a thread per connection keeps this image dependency-free; it is a test image
        threading.Thread(target=_serve_connection, args=(conn, greeting), daemon=True).start()


if __name__ == "__main__":
    main()
