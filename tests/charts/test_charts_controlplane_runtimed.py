"""The kruntimes chart's control plane: its HTTP probes and the runtimed sidecar settings.

T2 F17: the control plane's probes were TCP connects (the kernel completes them from the
listen backlog even while the trio loop is wedged). T2 F16: the runtimed sidecar's
resources are a chart value that reaches the control plane's ``--runtimed-resources``,
parsed here by the control plane's real click command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from chart_rendering import KRUNTIMES, containers, deep_merge, render, requires_helm

from krt.controlplane.sidecar_settings import DEFAULT_RUNTIMED_RESOURCES

pytestmark = requires_helm

TLS = {"gateway": {"tls": {"secretName": "gateway-tls"}}}


def _controlplane(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    docs = render(KRUNTIMES, deep_merge(TLS, values or {}))
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == "controlplane"
    )
    return next(
        c for c in containers(deployment["spec"]["template"]["spec"]) if c["name"] == "controlplane"
    )


def _wiring(values: Mapping[str, Any] | None = None) -> Any:
    """The RuntimedWiring the control plane builds from the rendered args (its real CLI)."""
    import krt.controlplane.__main__ as cli

    captured: list[Any] = []
    args = list(_controlplane(values)["args"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli.trio, "run", lambda _fn, _kc, _ctx, config: captured.append(config))
        patch.setattr(cli, "configure_logging", lambda level: None)
        patch.setattr(cli, "freeze_startup_heap", lambda: None)
        cli.main.main(args, standalone_mode=False)
    return captured[0].runtimed


def test_controlplane_probes_are_http_healthz() -> None:
    c = _controlplane()
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert "tcpSocket" not in probe
    assert c["livenessProbe"]["timeoutSeconds"] == 5
    assert c["readinessProbe"]["periodSeconds"] == 10  # controlplane.readinessProbe


def test_runtimed_resources_default_to_the_control_plane_defaults() -> None:
    assert _wiring().resources == DEFAULT_RUNTIMED_RESOURCES


def test_runtimed_resources_value_reaches_the_control_plane() -> None:
    custom = {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    assert _wiring({"runtimed": {"resources": custom}}).resources == custom
    # null (Helm's way to drop a default map): the sidecar gets no requests or limits
    assert _wiring({"runtimed": {"resources": None}}).resources == {}
    assert _wiring({"runtimed": {"resources": {"limits": None}}}).resources == {
        "requests": {"cpu": "50m", "memory": "96Mi"}
    }
    # partial overrides merge with the defaults as Helm values do
    merged = _wiring({"runtimed": {"resources": {"limits": {"memory": "2Gi"}}}}).resources
    assert merged == {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "2Gi"}}
