"""Fixtures of the kind end-to-end tests (docs/e2e.md).

``kind_cluster`` (session): preflight, then a kind cluster with the images built from
images/Dockerfile and both charts installed; every test that uses it is skipped, with the
reason printed (``-rs``), when kind, kubectl, Docker or Helm is missing. ``gateway_url``
(session): a ``kubectl port-forward`` to the gateway Service.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .kind_harness import (
    RUNS_NAMESPACE,
    E2EError,
    KindCluster,
    PortForward,
    Settings,
    build_and_load_images,
    create_or_reuse,
    delete_cluster,
    install,
    preflight,
)

#: Prefix of every Run name the tests use, so a reused cluster is cleaned up.
E2E_PREFIX = "e2e-"


@pytest.fixture(scope="session")
def e2e_settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def kind_cluster(
    e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KindCluster]:
    reason = preflight(e2e_settings)
    if reason is not None:
        print(f"\ntests/e2e skipped: {reason}", file=sys.stderr)
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("kind")
    cluster = create_or_reuse(e2e_settings, workdir)
    try:
        if not e2e_settings.skip_build:
            build_and_load_images(cluster, e2e_settings.image_tag)
        install(cluster, e2e_settings, workdir)
        yield cluster
    finally:
        _delete_test_runs(cluster)
        if cluster.created and not e2e_settings.keep:
            delete_cluster(cluster)


def _delete_test_runs(cluster: KindCluster) -> None:
    """Delete the Runs the tests created (names starting with E2E_PREFIX); best effort."""
    env = {**os.environ, **cluster.env()}
    listed = subprocess.run(
        ["kubectl", "get", "runs", "-n", RUNS_NAMESPACE, "-o", "name"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    names = [n for n in listed.stdout.split() if n.split("/", 1)[-1].startswith(E2E_PREFIX)]
    if names:
        subprocess.run(
            ["kubectl", "delete", "-n", RUNS_NAMESPACE, "--wait=false", *names],
            env=env,
            capture_output=True,
            check=False,
            timeout=60,
        )


@pytest.fixture(scope="session")
def gateway_url(kind_cluster: KindCluster) -> Iterator[str]:
    try:
        forward = PortForward(kind_cluster)
    except E2EError as exc:
        pytest.fail(str(exc))
    try:
        yield forward.url
    finally:
        forward.close()


@pytest.fixture(scope="session")
def gateway_ca_file(kind_cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "gateway-ca.crt"
    path.write_bytes(kind_cluster.gateway_ca_pem)
    return path
