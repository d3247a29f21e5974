"""``krt dev up`` on an existing state directory reuses the API server port when it is free.

A resumed cluster that moved to a new port left running clients (``krt wait``, ``kubectl
get -w``) retrying the old address until their own timeout.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from krt.cli.dev import previous_port


def _write_kubeconfig(state: Path, server: str) -> None:
    state.joinpath("kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: localkube\n  cluster:\n"
        f"    server: {server}\n"
    )


@pytest.fixture
def free_port() -> int:
    """A port that was free a moment ago (bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    return port


def test_previous_port_is_reused_when_free(tmp_path: Path, free_port: int) -> None:
    _write_kubeconfig(tmp_path, f"https://127.0.0.1:{free_port}")
    assert previous_port(tmp_path) == free_port


def test_previous_port_taken_means_any_free_port(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = int(holder.getsockname()[1])
        _write_kubeconfig(tmp_path, f"https://127.0.0.1:{port}")
        assert previous_port(tmp_path) == 0


def test_previous_port_after_a_closed_connection_in_time_wait(tmp_path: Path) -> None:
    # the stopped server's side closed first: its address is in TIME_WAIT, which a
    # listener with SO_REUSEADDR (trio's, localkube's) may bind again
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = int(server.getsockname()[1])
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # server side closes first -> TIME_WAIT on the server's port
        client.close()
    _write_kubeconfig(tmp_path, f"https://127.0.0.1:{port}")
    assert previous_port(tmp_path) == port


@pytest.mark.parametrize(
    "content",
    [
        None,  # no kubeconfig: a fresh state directory
        "clusters: [\n",  # not YAML
        "clusters: []\n",  # no cluster
        "clusters:\n- cluster:\n    server: https://127.0.0.1\n",  # no port
        "clusters:\n- cluster:\n    server: https://127.0.0.1:99999\n",  # not a port
    ],
)
def test_previous_port_unknown_means_any_free_port(tmp_path: Path, content: str | None) -> None:
    if content is not None:
        tmp_path.joinpath("kubeconfig").write_text(content)
    assert previous_port(tmp_path) == 0
