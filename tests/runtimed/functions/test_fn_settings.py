"""Endpoint settings and inline defaults of the function lifecycle (seed 000 Run Status API)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fn_builders import fn_run

from krt.api import Run
from krt.api.errors import EndpointPathError
from krt.api.run import EndpointProtocol
from runtimed.functions.settings import (
    FunctionSettings,
    FunctionTimings,
    default_inline_path,
    load_ca_bundle,
)

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_default_inline_file_by_runtime() -> None:
    assert default_inline_path("python") == "main.py"
    assert default_inline_path("python-3-12") == "main.py"
    assert default_inline_path("bash") == "main.sh"
    assert default_inline_path("my-bash") == "main.sh"
    assert default_inline_path("sh") == "main.sh"
    assert default_inline_path("bashful") == "main.py"
    assert default_inline_path("custom", {"custom": "handler.rb"}) == "handler.rb"


def test_explicit_inline_path_wins() -> None:
    settings = FunctionSettings()
    run = fn_run(runtime="bash")
    assert settings.inline_path(run) == "main.sh"
    data = run.to_dict()
    data["spec"]["source"]["inlinePath"] = "lib/handler.sh"
    assert settings.inline_path(Run.from_dict(data)) == "lib/handler.sh"


def test_endpoint_from_the_shared_helper() -> None:
    run = fn_run(namespace="team-a")
    https = FunctionSettings(gateway_url="https://gw.example:8443/prefix/", ca_bundle=PEM)
    endpoint = https.endpoint(run)
    assert endpoint.protocol is EndpointProtocol.HTTPS
    assert endpoint.url == (
        f"https://gw.example:8443/prefix/v1/namespaces/team-a/runtimes/python/functions/"
        f"{run.metadata.uid}:invoke"
    )
    assert endpoint.ca_bundle == PEM
    assert FunctionSettings(gateway_url="http://127.0.0.1:8080").endpoint(run).protocol is (
        EndpointProtocol.HTTP
    )


def test_bad_settings_are_refused() -> None:
    with pytest.raises(EndpointPathError, match="baseURL"):
        FunctionSettings(gateway_url="runtime-gateway")
    with pytest.raises(ValueError, match="16384"):
        FunctionSettings(ca_bundle=b"x" * (16 * 1024 + 1))
    with pytest.raises(ValueError, match="poll_min"):
        FunctionTimings(poll_min=10, poll_max=5)
    with pytest.raises(ValueError, match="rpc"):
        FunctionTimings(rpc=0)


def test_ca_bundle_file(tmp_path: Path) -> None:
    good = tmp_path / "ca.crt"
    good.write_bytes(PEM)
    assert load_ca_bundle(good) == PEM
    empty = tmp_path / "empty.crt"
    empty.write_bytes(b"\n")
    with pytest.raises(ValueError, match="empty"):
        load_ca_bundle(empty)
    junk = tmp_path / "junk.crt"
    junk.write_bytes(b"not a certificate")
    with pytest.raises(ValueError, match="no PEM"):
        load_ca_bundle(junk)
    big = tmp_path / "big.crt"
    big.write_bytes(PEM + b"x" * 20000)
    with pytest.raises(ValueError, match="16384"):
        load_ca_bundle(big)
