"""The Helm charts, rendered by Helm's engine and checked against the Kubernetes 1.32 schemas.

Every value combination the docs promise is rendered here (gateway on/off, existing Secret or
cert-manager, NetworkPolicy on/off, restricted namespaces, ServiceMonitor, PDB, peer mTLS,
images) and its manifests are validated with ``kubernetes-validate`` (strict: unknown fields
are errors). Runtimes are validated against the chart's own CRD schema. Component arguments
are parsed by the components' real click commands, so a renamed flag breaks a test here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from chart_rendering import (
    KRUNTIMES,
    NAMESPACE,
    REPO,
    RUNTIMES_CHART,
    RenderError,
    containers,
    crds,
    deep_merge,
    find,
    one,
    render,
    render_files,
    requires_helm,
    values_file,
)

from krt.api.naming import RUNTIMED_GRPC_PORT
from krt.controlplane.runtime_resources import RUNTIMED_RULES

pytestmark = requires_helm

K8S_VERSION = "1.32.0"
TLS = {"gateway": {"tls": {"secretName": "gateway-tls"}}}
#: Kinds whose schemas are not Kubernetes built-ins (checked field by field in their tests).
CUSTOM_KINDS = {"Runtime", "Certificate", "Issuer", "ServiceMonitor"}


def kruntimes(values: Mapping[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return render(KRUNTIMES, deep_merge(TLS, values or {}), **kwargs)


def runtimes(values: Mapping[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return render(RUNTIMES_CHART, values or {}, namespace="default", **kwargs)


def runtime_schema() -> dict[str, Any]:
    crd = next(c for c in crds() if c["spec"]["names"]["kind"] == "Runtime")
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def assert_valid(docs: list[dict[str, Any]]) -> None:
    """Every manifest passes its Kubernetes 1.32 schema (strict) or the Runtime CRD schema."""
    assert docs, "nothing rendered"
    for doc in docs:
        label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc.get("kind") == "Runtime":
            jsonschema.validate(doc, runtime_schema())
            continue
        if doc.get("kind") in CUSTOM_KINDS:
            assert doc["apiVersion"] in ("cert-manager.io/v1", "monitoring.coreos.com/v1"), label
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = list(getattr(exc, "absolute_path", []))
            pytest.fail(
                f"{label} fails the Kubernetes {K8S_VERSION} schema at {path}: {exc.message}"
            )


def deployment(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return one(docs, "Deployment", f"krt-kruntimes-{component}")


def container_named(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    """The first container of the one Deployment of ``component`` (any release name)."""
    (found,) = [
        d
        for d in find(docs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return found["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def container(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    spec = deployment(docs, component)["spec"]["template"]["spec"]
    return spec["containers"][0]


def arg_value(args: list[str], flag: str) -> list[str]:
    return [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]


# ----------------------------------------------------------------------------- value matrix

COMBINATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "gateway-disabled": {"gateway": {"enabled": False, "tls": {"secretName": ""}}},
    "cert-manager": {"gateway": {"tls": {"secretName": "", "certManager": {"enabled": True}}}},
    "cert-manager-cluster-issuer": {
        "gateway": {
            "tls": {
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"},
                }
            }
        }
    },
    "network-policy": {
        "networkPolicy": {
            "enabled": True,
            "gateway": {
                "allowedNamespaceSelectors": [
                    {"matchLabels": {"kubernetes.io/metadata.name": "agents"}}
                ],
                "allowedPodSelectors": [{"matchLabels": {"app": "caller"}}],
            },
            "metricsNamespaceSelectors": [
                {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
            ],
        }
    },
    "network-policy-gateway-disabled": {
        "networkPolicy": {"enabled": True},
        "gateway": {"enabled": False},
    },
    "watch-namespaces": {"controlplane": {"watchNamespaces": ["team-a", "team-b"]}},
    "service-monitor": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"r": "x"}}}},
    "peer-tls": {"runtimed": {"peerTLS": {"enabled": True, "secretName": "peer-tls"}}},
    "runtimed-wiring": {
        "runtimed": {
            "gatewayURL": "https://invoke.example.com:8443/kruntimes",
            "gatewayCA": {"configMapName": "corp-ca"},
            "peerTLS": {"enabled": True},
        }
    },
    "no-pdb": {"gateway": {"podDisruptionBudget": {"enabled": False}}},
    "pdb-max-unavailable": {"gateway": {"podDisruptionBudget": {"maxUnavailable": 1}}},
    "localkube": values_file(KRUNTIMES, "values-localkube.yaml"),
}


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_kruntimes_combination_renders_valid_manifests(name: str) -> None:
    assert_valid(kruntimes(COMBINATIONS[name]))


@pytest.mark.parametrize(
    "values",
    [
        {},
        values_file(RUNTIMES_CHART, "values-localkube.yaml"),
        {"networkPolicy": {"enabled": True}},
    ],
    ids=["defaults", "localkube", "network-policy"],
)
def test_runtimes_chart_renders_valid_manifests(values: dict[str, Any]) -> None:
    assert_valid(runtimes(values))


# ----------------------------------------------------------------------------- control plane


def test_controlplane_runs_leader_elected_with_args_its_cli_accepts() -> None:
    from krt.controlplane.__main__ import main, parse_listen_address

    docs = kruntimes()
    c = container(docs, "controlplane")
    assert c["image"] == "kruntimes/controlplane:0.1.0"
    args = c["args"]
    assert "--leader-elect" in args
    assert arg_value(args, "--lease-namespace") == [NAMESPACE]
    ctx = main.make_context("krt-controlplane", list(args))  # unknown flags raise here
    assert ctx.params["leader_elect"] is True
    assert ctx.params["lease_namespace"] == NAMESPACE
    assert ctx.params["namespaces"] == ()
    assert parse_listen_address(ctx.params["metrics_addr"]) == ("0.0.0.0", 8080)
    assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]


def test_watch_namespaces_bind_the_cluster_role_per_namespace_only() -> None:
    docs = kruntimes({"controlplane": {"watchNamespaces": ["team-a", "team-b"]}})
    assert find(docs, "ClusterRoleBinding") == []
    bindings = find(docs, "RoleBinding")
    by_ns = {b["metadata"]["namespace"]: b for b in bindings}
    assert set(by_ns) == {"team-a", "team-b", NAMESPACE}
    for ns in ("team-a", "team-b"):
        assert by_ns[ns]["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "krt-kruntimes-controlplane",
        }
    # the release namespace gets only the leader Lease
    assert by_ns[NAMESPACE]["roleRef"]["kind"] == "Role"
    assert one(docs, "Role")["metadata"]["namespace"] == NAMESPACE
    args = container(docs, "controlplane")["args"]
    assert arg_value(args, "--namespace") == ["team-a", "team-b"]


LEADER_ROLE = "krt-kruntimes-controlplane-leader-election"


@pytest.mark.parametrize(
    "watch", [[], ["team-a"], [NAMESPACE]], ids=["all", "other-namespace", "release-namespace"]
)
def test_leader_lease_is_granted_by_name_in_the_release_namespace_only(watch: list[str]) -> None:
    """F5: the leader Lease has its own Role, whatever is watched; get/update name the Lease
    (create cannot: an object has no name before it exists)."""
    docs = kruntimes({"controlplane": {"watchNamespaces": watch}})
    lease_name = arg_value(container(docs, "controlplane")["args"], "--lease-name")
    assert lease_name == ["krt-kruntimes-controlplane"]
    role = one(docs, "Role", LEADER_ROLE)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": lease_name,
            "verbs": ["get", "update"],
        },
    ]
    binding = one(docs, "RoleBinding", LEADER_ROLE)
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": LEADER_ROLE,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "krt-kruntimes-controlplane", "namespace": NAMESPACE}
    ]
    # the ClusterRole is bound where the control plane works, and nowhere else
    cluster_bindings = [
        b for b in find(docs, "RoleBinding") if b["roleRef"]["kind"] == "ClusterRole"
    ]
    assert sorted(b["metadata"]["namespace"] for b in cluster_bindings) == sorted(watch)
    assert len(find(docs, "ClusterRoleBinding")) == (0 if watch else 1)


def test_leader_lease_name_is_release_scoped_unless_given() -> None:
    """F4: two releases in one namespace must not share (and fight over) one leader Lease."""

    def lease(values: dict[str, Any] | None = None, release: str = "krt") -> str:
        docs = kruntimes(values, release=release)
        (name,) = arg_value(container_named(docs, "controlplane")["args"], "--lease-name")
        return name

    assert lease() == "krt-kruntimes-controlplane"
    assert lease(release="staging") == "staging-kruntimes-controlplane"
    fixed = {"controlplane": {"leaderElection": {"leaseName": "krt-controlplane"}}}
    assert lease(fixed) == "krt-controlplane"
    docs = kruntimes(fixed)
    (named,) = [r for r in one(docs, "Role", LEADER_ROLE)["rules"] if "resourceNames" in r]
    assert named["resourceNames"] == ["krt-controlplane"]


def _allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and verb in r.get("verbs", [])
        for r in rules
    )


def _triples(rules: Any) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_controlplane_cluster_role_is_exactly_what_the_code_declares() -> None:
    from krt.controlplane.rbac import CONTROLPLANE_RULES

    rules = one(kruntimes(), "ClusterRole")["rules"]
    assert _triples(rules) == _triples(CONTROLPLANE_RULES)


def test_controlplane_holds_every_permission_it_grants_runtimed() -> None:
    """RBAC escalation prevention: a Role can only be created by a holder of its permissions."""
    rules = one(kruntimes(), "ClusterRole")["rules"]
    for rule in RUNTIMED_RULES:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert _allows(rules, group, resource, verb), (group, resource, verb)


def test_controlplane_cluster_role_is_least_privilege() -> None:
    rules = one(kruntimes(), "ClusterRole")["rules"]
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
        assert "secrets" not in rule["resources"]
        assert "configmaps" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"])
        if "roles" in rule["resources"] or "deployments" in rule["resources"]:
            assert "delete" not in rule["verbs"]  # children are garbage-collected, never deleted
    needed = [
        ("kruntimes.io", "runs", "watch"),
        ("kruntimes.io", "runs", "delete"),
        ("kruntimes.io", "runs/status", "update"),
        ("kruntimes.io", "runtimes/status", "update"),
        ("kruntimes.io", "runtimes/finalizers", "update"),
        ("apps", "deployments", "create"),
        ("apps", "deployments", "update"),
        ("", "services", "create"),
        ("", "serviceaccounts", "create"),
        ("rbac.authorization.k8s.io", "roles", "create"),
        ("rbac.authorization.k8s.io", "rolebindings", "create"),
        ("", "pods", "watch"),
        ("", "pods", "patch"),  # pod-deletion-cost before a Runtime scale-down
        ("discovery.k8s.io", "endpointslices", "watch"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "events", "create"),
    ]
    for group, resource, verb in needed:
        assert _allows(rules, group, resource, verb), (group, resource, verb)
    assert not _allows(rules, "kruntimes.io", "runs", "create")
    assert not _allows(rules, "kruntimes.io", "runtimes", "update")
    assert not _allows(rules, "", "pods", "create")
    assert not _allows(rules, "", "pods", "delete")  # the ReplicaSet removes Pods, not us


def test_cluster_role_binding_names_the_controlplane_service_account() -> None:
    docs = kruntimes()
    binding = one(docs, "ClusterRoleBinding")
    sa = one(docs, "ServiceAccount", "krt-kruntimes-controlplane")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert (
        deployment(docs, "controlplane")["spec"]["template"]["spec"]["serviceAccountName"]
        == (sa["metadata"]["name"])
    )


# ----------------------------------------------------------------------------- gateway


def test_gateway_service_is_cluster_ip_443_to_container_8443() -> None:
    docs = kruntimes()
    svc = one(docs, "Service", "runtime-gateway")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
    ]
    c = container(docs, "gateway")
    https = next(p for p in c["ports"] if p["name"] == "https")
    assert https["containerPort"] == 8443
    pod_labels = deployment(docs, "gateway")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    # the Service selects gateway Pods only, never the control plane
    cp_labels = deployment(docs, "controlplane")["spec"]["template"]["metadata"]["labels"]
    assert not svc["spec"]["selector"].items() <= cp_labels.items()


def test_gateway_args_are_accepted_by_its_cli_and_use_the_mounted_secret() -> None:
    from gateway.__main__ import main

    docs = kruntimes()
    c = container(docs, "gateway")
    ctx = main.make_context("krt-gateway", list(c["args"]))
    assert ctx.params["tls_cert_file"] == "/etc/kruntimes/gateway-tls/tls.crt"
    assert ctx.params["tls_key_file"] == "/etc/kruntimes/gateway-tls/tls.key"
    assert ctx.params["bind"] == "0.0.0.0:8443"
    assert ctx.params["runtimed_port"] == RUNTIMED_GRPC_PORT
    assert ctx.params["upstream_cert_file"] is None
    spec = deployment(docs, "gateway")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == "gateway-tls"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "tls")
    assert mount == {"name": "tls", "mountPath": "/etc/kruntimes/gateway-tls", "readOnly": True}


def test_gateway_has_no_kubernetes_api_credentials() -> None:
    docs = kruntimes()
    sa = one(docs, "ServiceAccount", "krt-kruntimes-gateway")
    assert sa["automountServiceAccountToken"] is False
    assert (
        deployment(docs, "gateway")["spec"]["template"]["spec"]["automountServiceAccountToken"]
        is False
    )
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for binding in find(docs, kind):
            assert all(s["name"] != "krt-kruntimes-gateway" for s in binding["subjects"])


def test_gateway_tls_secret_is_required_without_cert_manager() -> None:
    with pytest.raises(RenderError, match=r"gateway\.tls\.secretName is required"):
        render(KRUNTIMES, {})


def test_gateway_disabled_renders_no_gateway_objects_and_needs_no_certificate() -> None:
    docs = render(KRUNTIMES, {"gateway": {"enabled": False}})
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert not [n for n in names if "gateway" in n[1]]
    assert find(docs, "PodDisruptionBudget") == []
    assert find(docs, "Certificate") == []
    assert deployment(docs, "controlplane")


def test_single_gateway_replica_gets_no_budget_that_would_block_node_drains() -> None:
    """F9: minAvailable 1 over one Pod refuses every eviction, so its node never drains."""
    one_replica = {"gateway": {"replicas": 1}}
    assert find(kruntimes(one_replica), "PodDisruptionBudget") == []
    # maxUnavailable never blocks a drain: kept as asked
    pdb = one(
        kruntimes(
            deep_merge(one_replica, {"gateway": {"podDisruptionBudget": {"maxUnavailable": 1}}})
        ),
        "PodDisruptionBudget",
    )
    assert pdb["spec"]["maxUnavailable"] == 1
    assert (
        one(kruntimes({"gateway": {"replicas": 2}}), "PodDisruptionBudget")["spec"]["minAvailable"]
        == 1
    )


def test_pod_disruption_budget_is_optional_and_selects_gateway_pods() -> None:
    docs = kruntimes()
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    labels = deployment(docs, "gateway")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert (
        find(
            kruntimes({"gateway": {"podDisruptionBudget": {"enabled": False}}}),
            "PodDisruptionBudget",
        )
        == []
    )
    pdb = one(
        kruntimes({"gateway": {"podDisruptionBudget": {"maxUnavailable": 1}}}),
        "PodDisruptionBudget",
    )
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}


def test_cert_manager_without_issuer_creates_a_private_ca_chain() -> None:
    docs = render(KRUNTIMES, {"gateway": {"tls": {"certManager": {"enabled": True}}}})
    issuers = {i["metadata"]["name"]: i["spec"] for i in find(docs, "Issuer")}
    assert issuers == {
        "krt-kruntimes-gateway-selfsigned": {"selfSigned": {}},
        "krt-kruntimes-gateway-ca": {"ca": {"secretName": "krt-kruntimes-gateway-ca"}},
    }
    ca = one(docs, "Certificate", "krt-kruntimes-gateway-ca")
    assert ca["spec"]["isCA"] is True
    assert ca["spec"]["issuerRef"]["name"] == "krt-kruntimes-gateway-selfsigned"
    serving = one(docs, "Certificate", "krt-kruntimes-gateway-tls")
    assert serving["spec"]["secretName"] == "runtime-gateway-tls"
    assert serving["spec"]["issuerRef"] == {
        "name": "krt-kruntimes-gateway-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert f"runtime-gateway.{NAMESPACE}.svc.cluster.local" in serving["spec"]["dnsNames"]
    assert f"runtime-gateway.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    spec = deployment(docs, "gateway")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == "runtime-gateway-tls"


def test_cert_manager_with_an_existing_issuer_creates_only_the_certificate() -> None:
    docs = kruntimes(
        {
            "gateway": {
                "tls": {
                    "secretName": "gw-cert",
                    "certManager": {
                        "enabled": True,
                        "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"},
                        "extraDnsNames": ["gateway.example.com"],
                    },
                }
            }
        }
    )
    assert find(docs, "Issuer") == []
    cert = one(docs, "Certificate")
    assert cert["spec"]["secretName"] == "gw-cert"
    assert cert["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert cert["spec"]["dnsNames"][-1] == "gateway.example.com"


def test_cert_manager_issuer_kind_is_checked() -> None:
    with pytest.raises(
        RenderError, match="issuerRef/kind': value must be one of 'Issuer', 'ClusterIssuer'"
    ):
        kruntimes(
            {"gateway": {"tls": {"certManager": {"enabled": True, "issuerRef": {"kind": "Vault"}}}}}
        )


def test_peer_tls_mounts_the_secret_as_the_gateway_client_certificate() -> None:
    from gateway.__main__ import main

    docs = kruntimes({"runtimed": {"peerTLS": {"enabled": True, "secretName": "peer"}}})
    c = container(docs, "gateway")
    ctx = main.make_context("krt-gateway", list(c["args"]))
    assert ctx.params["upstream_ca_file"] == "/etc/kruntimes/peer-tls/ca.crt"
    assert ctx.params["upstream_cert_file"] == "/etc/kruntimes/peer-tls/tls.crt"
    assert ctx.params["upstream_key_file"] == "/etc/kruntimes/peer-tls/tls.key"
    spec = deployment(docs, "gateway")["spec"]["template"]["spec"]
    assert {"name": "peer-tls", "secret": {"secretName": "peer", "defaultMode": 0o440}} in spec[
        "volumes"
    ]
    with pytest.raises(RenderError, match="runtimed.peerTLS.secretName is required"):
        kruntimes({"runtimed": {"peerTLS": {"enabled": True, "secretName": ""}}})


def _controlplane_wiring(docs: list[dict[str, Any]]) -> Any:
    """The RuntimedWiring the chart's control-plane args produce (parsed by its real CLI)."""
    from krt.controlplane.__main__ import main
    from krt.controlplane.runtime_resources import RuntimedWiring

    ctx = main.make_context("krt-controlplane", list(container(docs, "controlplane")["args"]))
    return RuntimedWiring(
        gateway_url=ctx.params["gateway_url"] or None,
        gateway_ca_configmap=ctx.params["gateway_ca_configmap"] or None,
        peer_tls_secret=ctx.params["peer_tls_secret"] or None,
    )


def test_controlplane_wires_runtimed_to_this_release_gateway_by_default() -> None:
    from krt.controlplane.runtime_resources import RuntimedWiring

    assert _controlplane_wiring(kruntimes()) == RuntimedWiring(
        gateway_url=f"https://runtime-gateway.{NAMESPACE}.svc.cluster.local",
        gateway_ca_configmap="kruntimes-gateway-ca",  # what `krt dev up` creates; optional
        peer_tls_secret=None,  # peer mTLS is off unless enabled (gateway and runtimed agree)
    )
    # another release namespace: the published URL follows the gateway Service
    other = _controlplane_wiring(kruntimes(namespace="platform"))
    assert other.gateway_url == "https://runtime-gateway.platform.svc.cluster.local"
    # and its port, when the Service is not on 443
    port = _controlplane_wiring(kruntimes({"gateway": {"service": {"port": 8443}}}))
    assert port.gateway_url == f"https://runtime-gateway.{NAMESPACE}.svc.cluster.local:8443"


def test_controlplane_wiring_values_reach_its_args() -> None:
    from krt.controlplane.runtime_resources import RuntimedWiring

    docs = kruntimes(
        {
            "runtimed": {
                "gatewayURL": "https://invoke.example.com",
                "gatewayCA": {"configMapName": "corp-ca"},
                "peerTLS": {"enabled": True, "secretName": "peer"},
            }
        }
    )
    assert _controlplane_wiring(docs) == RuntimedWiring(
        gateway_url="https://invoke.example.com",
        gateway_ca_configmap="corp-ca",
        peer_tls_secret="peer",
    )
    # the gateway uses the same Secret to reach runtimed with mutual TLS
    args = container(docs, "gateway")["args"]
    assert arg_value(args, "--upstream-cert-file") == ["/etc/kruntimes/peer-tls/tls.crt"]
    # no gateway and no URL: runtimed keeps its own default; no CA ConfigMap: none mounted
    bare = _controlplane_wiring(
        kruntimes({"gateway": {"enabled": False}, "runtimed": {"gatewayCA": {"configMapName": ""}}})
    )
    assert bare == RuntimedWiring()


# ----------------------------------------------------------------------------- security


def _assert_hardened(pod_spec: Mapping[str, Any], where: str) -> None:
    pod = pod_spec["securityContext"]
    assert pod["runAsNonRoot"] is True, where
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, where
    for c in containers(pod_spec):
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True, where
        assert sc["readOnlyRootFilesystem"] is True, where
        assert sc["allowPrivilegeEscalation"] is False, where
        assert sc["capabilities"] == {"drop": ["ALL"]}, where
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert c["resources"]["requests"], where
        # read-only root: the only writable paths are volumes
        assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"]), where


def test_every_pod_is_non_root_read_only_and_drops_all_capabilities() -> None:
    docs = kruntimes()
    for d in find(docs, "Deployment"):
        _assert_hardened(d["spec"]["template"]["spec"], d["metadata"]["name"])
    for rt in find(runtimes(), "Runtime"):
        _assert_hardened(rt["spec"]["template"]["spec"], rt["metadata"]["name"])


def test_replicas_values_reach_the_deployments() -> None:
    docs = kruntimes({"controlplane": {"replicas": 2}, "gateway": {"replicas": 3}})
    assert deployment(docs, "controlplane")["spec"]["replicas"] == 2
    assert deployment(docs, "gateway")["spec"]["replicas"] == 3


def test_resources_values_reach_the_containers() -> None:
    limits = {"cpu": "2", "memory": "1Gi"}
    docs = kruntimes(
        {
            "controlplane": {"resources": {"limits": limits}},
            "gateway": {"resources": {"limits": limits}},
        }
    )
    assert container(docs, "controlplane")["resources"]["limits"] == limits
    assert container(docs, "gateway")["resources"]["limits"] == limits


# ----------------------------------------------------------------------------- network policy


def test_network_policy_is_off_by_default() -> None:
    assert find(kruntimes(), "NetworkPolicy") == []
    assert find(runtimes(), "NetworkPolicy") == []


def test_gateway_network_policy_admits_only_listed_callers_to_https() -> None:
    docs = kruntimes(COMBINATIONS["network-policy"])
    policy = one(docs, "NetworkPolicy", "krt-kruntimes-gateway")
    labels = deployment(docs, "gateway")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    https, metrics = policy["spec"]["ingress"]
    assert https["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert https["from"] == [
        {"podSelector": {}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agents"}}},
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "caller"}}},
    ]
    assert metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    cp = one(docs, "NetworkPolicy", "krt-kruntimes-controlplane")
    assert cp["spec"]["ingress"][0]["ports"] == [{"port": "metrics", "protocol": "TCP"}]


def test_controlplane_network_policy_denies_all_ingress_without_metrics_namespaces() -> None:
    docs = kruntimes({"networkPolicy": {"enabled": True}})
    assert one(docs, "NetworkPolicy", "krt-kruntimes-controlplane")["spec"]["ingress"] == []
    gateway = one(docs, "NetworkPolicy", "krt-kruntimes-gateway")
    assert gateway["spec"]["ingress"] == [
        {"ports": [{"port": "https", "protocol": "TCP"}], "from": [{"podSelector": {}}]}
    ]


def test_runtime_pod_network_policy_admits_the_gateway_and_peers_only() -> None:
    docs = runtimes(
        {
            "networkPolicy": {
                "enabled": True,
                "metricsNamespaceSelectors": [{"matchLabels": {"team": "obs"}}],
            }
        }
    )
    policy = one(docs, "NetworkPolicy")
    runtime_pods = {"matchExpressions": [{"key": "kruntimes.io/runtime", "operator": "Exists"}]}
    assert policy["spec"]["podSelector"] == runtime_pods
    grpc, server, metrics = policy["spec"]["ingress"]
    assert grpc["ports"] == [{"port": RUNTIMED_GRPC_PORT, "protocol": "TCP"}]
    gateway_peer = grpc["from"][0]
    assert gateway_peer["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "kruntimes-system"}
    }
    # the selector matches the gateway Pods the kruntimes chart renders
    gateway_labels = deployment(kruntimes(), "gateway")["spec"]["template"]["metadata"]["labels"]
    assert gateway_peer["podSelector"]["matchLabels"].items() <= gateway_labels.items()
    assert grpc["from"][1] == {"podSelector": runtime_pods}
    assert server == {
        "ports": [{"port": 9091, "protocol": "TCP"}],
        "from": [{"podSelector": runtime_pods}],
    }
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"team": "obs"}}}]


# ----------------------------------------------------------------------------- monitoring


def test_service_monitors_scrape_the_metrics_services() -> None:
    assert find(kruntimes(), "ServiceMonitor") == []
    docs = kruntimes(
        {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    )
    monitors = find(docs, "ServiceMonitor")
    assert sorted(m["metadata"]["name"] for m in monitors) == [
        "krt-kruntimes-controlplane",
        "krt-kruntimes-gateway",
    ]
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "prom"
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [
            s
            for s in find(docs, "Service")
            if selector.items() <= s["metadata"]["labels"].items()
            and any(p["name"] == "metrics" for p in s["spec"]["ports"])
        ]
        assert len(services) == 1, monitor["metadata"]["name"]
        assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    gateway_off = kruntimes(
        {"gateway": {"enabled": False}, "metrics": {"serviceMonitor": {"enabled": True}}}
    )
    assert [m["metadata"]["name"] for m in find(gateway_off, "ServiceMonitor")] == [
        "krt-kruntimes-controlplane"
    ]


# ----------------------------------------------------------------------------- images


def test_image_registry_tag_and_digest() -> None:
    docs = kruntimes(
        {
            "images": {
                "registry": "registry.example.com/",
                "tag": "1.2.3",
                "gateway": {"digest": "sha256:" + "a" * 64},
                "pullSecrets": ["regcred"],
            }
        }
    )
    assert (
        container(docs, "controlplane")["image"]
        == "registry.example.com/kruntimes/controlplane:1.2.3"
    )
    assert (
        container(docs, "gateway")["image"]
        == "registry.example.com/kruntimes/gateway@sha256:" + "a" * 64
    )
    spec = deployment(docs, "controlplane")["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]


# ----------------------------------------------------------------------------- runtimes chart


def test_builtin_runtimes_run_their_servers_with_args_their_cli_accepts() -> None:
    from servers.common.cli import build_command, parse_listen
    from servers.python.adapter import PythonAdapter

    docs = runtimes()
    by_name = {r["metadata"]["name"]: r for r in find(docs, "Runtime")}
    assert set(by_name) == {"python", "bash"}
    command = build_command(PythonAdapter, prog="krt-python-runtime")
    for name, image in (
        ("python", "kruntimes/python-runtime:0.1.0"),
        ("bash", "kruntimes/bash-runtime:0.1.0"),
    ):
        spec = by_name[name]["spec"]
        assert spec["daemonImage"] == "kruntimes/runtimed:0.1.0"
        assert spec["port"] == 9091
        (server,) = spec["template"]["spec"]["containers"]
        assert server["image"] == image
        assert server["name"] != "runtimed"  # reserved for the injected sidecar
        ctx = command.make_context("krt-python-runtime", list(server["args"]))
        assert str(ctx.params["work_dir"]) == "/kruntimes/workspace"
        listen = ctx.params["listen"].replace("$(POD_IP)", "10.1.2.3")
        assert parse_listen(listen) == ("10.1.2.3", spec["port"])
        env = {e["name"]: e for e in server["env"]}
        assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_runtimes_replicas_and_capacity_values() -> None:
    docs = runtimes(
        {
            "python": {"replicas": 5, "capacity": {"runs": 8, "example.com/gpu": 1}},
            "bash": {"enabled": False},
        }
    )
    (python,) = find(docs, "Runtime")
    assert python["spec"]["replicas"] == 5
    assert python["spec"]["capacity"] == {"resources": {"runs": 8, "example.com/gpu": 1}}
    assert_valid(docs)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"python": {"capacity": {"runs": 1.5}}},
            "at '/python/capacity/runs': got number, want integer",
        ),
        ({"bash": {"capacity": {"runs": -1}}}, "at '/bash/capacity/runs': minimum: got -1, want 0"),
        (
            {"bash": {"capacity": {"runs": "two"}}},
            "at '/bash/capacity/runs': got string, want integer",
        ),
        ({"python": {"replicas": -1}}, "at '/python/replicas': minimum: got -1, want 0"),
        ({"python": {"name": "Py_thon"}}, "at '/python/name': 'Py_thon' does not match pattern"),
        ({"pyhton": {"replicas": 3}}, "additional properties 'pyhton' not allowed"),
        ({"bash": {"replica": 3}}, "at '/bash': additional properties 'replica' not allowed"),
        ({"bash": {"name": "python"}}, "python.name and bash.name must differ"),
    ],
)
def test_runtimes_chart_rejects_bad_values_naming_the_field(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(RenderError) as refused:
        runtimes(values)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"gatway": {"enabled": False}}, "additional properties 'gatway' not allowed"),
        ({"controlplane": {"replicas": 0}}, "at '/controlplane/replicas': minimum: got 0, want 1"),
        (
            {"controlplane": {"watchNamespaces": ["Team_A"]}},
            "at '/controlplane/watchNamespaces/0': 'Team_A' does not match pattern",
        ),
        ({"gateway": {"replicas": 0}}, "gateway.replicas must be at least 1"),
        (
            {"gateway": {"service": {"port": 0}}},
            "at '/gateway/service/port': minimum: got 0, want 1",
        ),
        ({"images": {"gateway": {"digest": "latest"}}}, "at '/images/gateway/digest'"),
        (
            {"networkPolicy": {"enabled": "yes"}},
            "at '/networkPolicy/enabled': got string, want boolean",
        ),
        ({"runtimed": {"gatewayURL": "runtime-gateway:443"}}, "at '/runtimed/gatewayURL'"),
        (
            {"runtimed": {"gatewayCA": {"configMapName": "Corp_CA"}}},
            "at '/runtimed/gatewayCA/configMapName'",
        ),
        (
            {"runtimed": {"peerTLS": {"enabled": True, "secretName": "Peer TLS"}}},
            "at '/runtimed/peerTLS/secretName'",
        ),
    ],
)
def test_kruntimes_chart_rejects_bad_values_naming_the_field(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(RenderError) as refused:
        kruntimes(values)
    assert message in str(refused.value)


def test_runtime_crd_rejects_what_the_chart_guards_against() -> None:
    """The chart's own checks mirror the CRD: a negative capacity fails the schema too."""
    (python, _) = find(runtimes(), "Runtime")
    python["spec"]["capacity"]["resources"]["runs"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(python, runtime_schema())


def test_localkube_values_bind_pod_ips_and_use_the_host_workspace() -> None:
    docs = kruntimes(values_file(KRUNTIMES, "values-localkube.yaml"))
    assert arg_value(container(docs, "gateway")["args"], "--bind") == ["$(POD_IP):8443"]
    assert arg_value(container(docs, "controlplane")["args"], "--metrics-addr") == [
        "$(POD_IP):8080"
    ]
    assert find(docs, "PodDisruptionBudget") == []
    rts = runtimes(values_file(RUNTIMES_CHART, "values-localkube.yaml"))
    for rt in find(rts, "Runtime"):
        (server,) = rt["spec"]["template"]["spec"]["containers"]
        assert arg_value(server["args"], "--work-dir") == ["$(KRT_POD_ROOT)/workspace"]


# ----------------------------------------------------------------------------- helm lint


@pytest.mark.parametrize(
    ("chart", "values"),
    [(KRUNTIMES, TLS), (KRUNTIMES, COMBINATIONS["cert-manager"]), (RUNTIMES_CHART, {})],
    ids=["kruntimes", "kruntimes-cert-manager", "kruntimes-runtimes"],
)
def test_helm_lint_strict_for_kubernetes_1_32(chart: Any, values: dict[str, Any]) -> None:
    import helm_python

    report = helm_python.lint(
        str(chart), values=values, strict=True, namespace=NAMESPACE, kube_version="v1.32.0"
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == []
    assert problems == []


def test_gateway_replicas_spread_over_nodes_unless_affinity_is_given() -> None:
    docs = kruntimes()
    affinity = deployment(docs, "gateway")["spec"]["template"]["spec"]["affinity"]
    (term,) = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    labels = deployment(docs, "gateway")["spec"]["template"]["metadata"]["labels"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    custom = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["edge"]}]}
                ]
            }
        }
    }
    docs = kruntimes({"gateway": {"affinity": custom}})
    assert deployment(docs, "gateway")["spec"]["template"]["spec"]["affinity"] == custom


# ----------------------------------------------------------------------------- names

#: A DNS-1123 label (Kubernetes "Object Names and IDs"): Services, and every name here.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: Everything the kruntimes chart can render at once.
EVERYTHING: dict[str, Any] = {
    "gateway": {"tls": {"secretName": "", "certManager": {"enabled": True}}},
    "networkPolicy": {"enabled": True},
    "metrics": {"serviceMonitor": {"enabled": True}},
}


@pytest.mark.parametrize(
    "release",
    [
        "a" * 45 + "-prod-eu",  # 53 characters: the longest name Helm accepts
        "my-kruntimes-" + "b" * 40,  # contains the chart name: used as the fullname as it is
        "c" * 48 + "-x-yz",  # a cut that would end in "-"
        "krt",
    ],
    ids=["53-chars", "contains-chart-name", "cut-at-dash", "short"],
)
@pytest.mark.parametrize("watch", [[], ["team-a"]], ids=["all-namespaces", "watch-namespaces"])
def test_every_object_name_is_a_dns_label_of_63_characters_at_most(
    release: str, watch: list[str]
) -> None:
    """F1: a long release name must not make a name the API server refuses (over 63
    characters): the release part is cut, the suffix kept, names stay distinct and every
    reference (roleRef, subjects, serviceAccountName, issuerRef) still finds its object."""
    docs = render(
        KRUNTIMES,
        deep_merge(EVERYTHING, {"controlplane": {"watchNamespaces": watch}}),
        release=release,
    )
    docs += render(RUNTIMES_CHART, {"networkPolicy": {"enabled": True}}, release=release)
    seen: set[tuple[str, str, str]] = set()
    for doc in docs:
        meta = doc["metadata"]
        name = meta["name"]
        assert len(name) <= 63, (doc["kind"], name, len(name))
        assert DNS_LABEL.fullmatch(name), (doc["kind"], name)
        key = (doc["kind"], meta.get("namespace", ""), name)
        assert key not in seen, key
        seen.add(key)
    names = {(kind, name) for kind, _, name in seen}
    for doc in docs:
        if "roleRef" in doc:
            assert (doc["roleRef"]["kind"], doc["roleRef"]["name"]) in names, doc["metadata"]
            for subject in doc["subjects"]:
                assert ("ServiceAccount", subject["name"]) in names, subject
        if doc["kind"] == "Deployment":
            sa = doc["spec"]["template"]["spec"]["serviceAccountName"]
            assert ("ServiceAccount", sa) in names, sa
        if doc["kind"] == "Certificate":
            issuer = doc["spec"]["issuerRef"]
            assert (issuer["kind"], issuer["name"]) in names, issuer
            assert len(doc["spec"]["commonName"]) <= 64  # the X.509 upper bound
    (lease,) = arg_value(container_named(docs, "controlplane")["args"], "--lease-name")
    assert len(lease) <= 63, lease
    assert DNS_LABEL.fullmatch(lease), lease
    assert_valid([d for d in docs if d["kind"] not in CUSTOM_KINDS])


def test_runtime_pod_network_policy_is_named_after_the_release() -> None:
    """F4: two releases of the runtimes chart in one namespace each own their policy."""
    values = {"networkPolicy": {"enabled": True}}
    first = one(runtimes(values, release="runtimes"), "NetworkPolicy")
    second = one(runtimes(values, release="team-b-runtimes"), "NetworkPolicy")
    assert first["metadata"]["name"] == "runtimes-runtime-pods"
    assert second["metadata"]["name"] == "team-b-runtimes-runtime-pods"


# ----------------------------------------------------------------------------- NOTES.txt


def test_notes_commands_are_accepted_by_krt(monkeypatch: pytest.MonkeyPatch) -> None:
    """F7: the command printed after `helm install` passes krt's own checks (it used to give
    `-- python -c ...`, which krt run refuses for the python Runtime)."""
    from click.testing import CliRunner

    from krt.cli import run_cmd
    from krt.cli.main import krt

    notes = render_files(KRUNTIMES, TLS)["kruntimes/templates/NOTES.txt"]
    commands = [
        shlex.split(line, comments=True)
        for line in notes.splitlines()
        if line.strip().startswith("krt ")
    ]
    assert commands, notes

    class Accepted(Exception):
        """Raised where krt would connect to the cluster: every check before it passed."""

    def no_cluster(*args: Any, **kwargs: Any) -> Any:
        raise Accepted

    monkeypatch.setattr(run_cmd, "open_kube", no_cluster)
    for argv in commands:
        result = CliRunner().invoke(krt, argv[1:])
        assert result.exit_code != 2, (argv, result.output)  # 2: a usage error
        reached = result.exception
        while reached is not None and not isinstance(reached, Accepted):
            reached = reached.__cause__ or reached.__context__
        assert isinstance(reached, Accepted), (argv, result.output, result.exception)


#: Docs whose object names are checked against the rendered chart (F4: they used to cite
#: `<release>-controlplane` where the object is `<release>-kruntimes-controlplane`).
NAMED_IN_DOCS = ("install.md",)
_DOC_NAMES = re.compile(
    r"deploy(?:ment)?/(?P<deployment>[a-z0-9<>-]+)"
    r"|serviceaccount:kruntimes-system:(?P<serviceaccount>[a-z0-9<>-]+)"
    r"|[Ll]ease `(?:kruntimes-system/)?(?P<lease>[a-z0-9<>-]*controlplane)`"
)


@pytest.mark.parametrize("doc", NAMED_IN_DOCS)
def test_object_names_in_the_docs_are_what_the_chart_renders(doc: str) -> None:
    """A name cited for the release `kruntimes` (install.md's example) or `krt` (`krt dev
    up`) is rendered under that release; a placeholder is `<fullname>-...`."""
    rendered: dict[str, set[str]] = {"deployment": set(), "serviceaccount": set(), "lease": set()}
    for release in ("kruntimes", "krt"):
        docs = kruntimes(release=release)
        rendered["deployment"] |= {d["metadata"]["name"] for d in find(docs, "Deployment")}
        rendered["serviceaccount"] |= {d["metadata"]["name"] for d in find(docs, "ServiceAccount")}
        for component in ("controlplane",):
            rendered["lease"] |= set(
                arg_value(container_named(docs, component)["args"], "--lease-name")
            )
    text = (REPO / "docs" / doc).read_text()
    assert "<release>-controlplane" not in text  # the fullname is not always <release>
    assert "<release>-gateway" not in text
    cited = [
        (kind, name)
        for match in _DOC_NAMES.finditer(text)
        for kind, name in match.groupdict().items()
        if name and not name.startswith("runtime-")  # per-Runtime objects, not the chart's
    ]
    assert cited, f"{doc} names no chart object any more: drop it from NAMED_IN_DOCS"
    for kind, name in cited:
        if "<" in name:
            assert name.startswith("<fullname>-"), (doc, kind, name)
        else:
            assert name in rendered[kind], (doc, kind, name, sorted(rendered[kind]))
