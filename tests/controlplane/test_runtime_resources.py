"""The Runtime controller's desired objects and status (issue 5 item 2)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from krt.api.conditions import find_condition
from krt.api.constants import (
    CAPACITY_ANNOTATION,
    RUNTIME_LABEL,
    RUNTIMED_READY_POD_CONDITION,
    ConditionStatus,
)
from krt.api.naming import DESIRED_HASH_ANNOTATION
from krt.api.runtime import Runtime
from krt.controlplane.runtime_resources import (
    RUNTIMED_RULES,
    RuntimedWiring,
    desired_deployment,
    desired_objects,
    desired_role,
    desired_role_binding,
    desired_service,
    merge_for_update,
    needs_update,
)
from krt.controlplane.runtime_status import runtime_status_patch

from .builders import NOW, make_runtime, pod, runtime_dict


def _containers(runtime: Runtime) -> dict[str, dict[str, Any]]:
    spec = desired_deployment(runtime)["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def test_deployment_injects_runtimed_sidecar_with_default_image() -> None:
    containers = _containers(make_runtime())
    assert set(containers) == {"runtime", "runtimed"}
    assert containers["runtimed"]["image"] == "kruntimes/runtimed"
    assert containers["runtimed"]["ports"] == [
        {"name": "grpc", "containerPort": 9090, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 8081, "protocol": "TCP"},
    ]


def test_runtimed_readiness_probe_on_healthz() -> None:
    """A runtimed that stops answering leaves the Service endpoints (chaos: paused runtimed)."""
    probe = _containers(make_runtime())["runtimed"]["readinessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert probe["periodSeconds"] * probe["failureThreshold"] <= 5


def test_runtimed_liveness_probe_is_generous() -> None:
    """runtimed is restarted only after a minute without an answer (T2 F16).

    /healthz answers while runtimed's loops run whatever the Runtime Server's health, so a
    down server never restarts runtimed; a burst or the chaos suite's 45 s SIGSTOP of
    runtimed (tests/chaos/faults.py) is not long enough to restart it.
    """
    probe = _containers(make_runtime())["runtimed"]["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert probe["periodSeconds"] == 10
    assert probe["timeoutSeconds"] == 5
    assert probe["failureThreshold"] == 6
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 60


def test_runtimed_meets_pod_security_restricted_on_its_own() -> None:
    """The sidecar's own securityContext passes the restricted profile (T2 F16).

    Pod Security admission checks every container; the Runtime's template cannot be relied on
    to set these at Pod level.
    """
    runtimed = _containers(make_runtime())["runtimed"]
    sc = runtimed["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in sc
    assert "runAsUser" not in sc  # the image's 65532, or the Pod's
    # read-only root filesystem, with a writable /tmp of its own
    assert sc["readOnlyRootFilesystem"] is True
    assert {"name": "kruntimes-runtimed-tmp", "mountPath": "/tmp"} in runtimed["volumeMounts"]
    volumes = desired_deployment(make_runtime())["spec"]["template"]["spec"]["volumes"]
    assert {"name": "kruntimes-runtimed-tmp", "emptyDir": {"sizeLimit": "64Mi"}} in volumes
    # the Runtime Server container is the template's own: untouched
    assert "securityContext" not in _containers(make_runtime())["runtime"]


def test_runtimed_gets_default_requests_and_a_memory_limit() -> None:
    resources = _containers(make_runtime())["runtimed"]["resources"]
    assert resources == {
        "requests": {"cpu": "50m", "memory": "96Mi"},
        "limits": {"memory": "512Mi"},
    }


def test_runtimed_resources_come_from_the_wiring_and_roll_the_pods() -> None:
    custom = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi", "cpu": 2}}
    wiring = RuntimedWiring(resources=custom)
    spec = desired_deployment(make_runtime(), wiring)["spec"]["template"]["spec"]
    runtimed = next(c for c in spec["containers"] if c["name"] == "runtimed")
    assert runtimed["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"memory": "2Gi", "cpu": "2"},
    }
    assert needs_update(
        desired_deployment(make_runtime()), desired_deployment(make_runtime(), wiring)
    )
    # {} (chart value `runtimed.resources: {}`): no resources at all
    none = desired_deployment(make_runtime(), RuntimedWiring(resources={}))["spec"]["template"]
    assert "resources" not in next(c for c in none["spec"]["containers"] if c["name"] == "runtimed")


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ([], "expected an object"),
        ({"request": {"cpu": "1"}}, "unknown key 'request'"),
        ({"limits": "1Gi"}, "limits must be an object"),
        ({"limits": {"memory": "1 GB"}}, "limits.memory: '1 GB' is not a quantity"),
        ({"requests": {"cpu": "-1"}}, "requests.cpu: '-1' is not a quantity"),
        ({"requests": {"cpu": True}}, "requests.cpu: True is not a quantity"),
        ({"requests": {"CPU!": "1"}}, "'CPU!' is not a resource name"),
    ],
)
def test_bad_runtimed_resources_are_refused_naming_the_entry(resources: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"runtimed resources: .*{message}"):
        RuntimedWiring(resources=resources)


def test_daemon_image_overrides_default() -> None:
    containers = _containers(make_runtime(daemon_image="example/runtimed:1"))
    assert containers["runtimed"]["image"] == "example/runtimed:1"


def test_runtimed_env() -> None:
    env = {e["name"]: e for e in _containers(make_runtime())["runtimed"]["env"]}
    for name, path in (
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_UID", "metadata.uid"),
        ("POD_IP", "status.podIP"),
    ):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == path
    assert env["RUNTIME_NAME"]["value"] == "python"
    assert env["RUNTIME_SERVER_ADDRESS"]["value"] == "$(POD_IP):9091"
    assert env["WORKSPACE_DIR"]["value"] == "/kruntimes/workspace"
    assert env["RUNTIMED_HTTP_PORT"]["value"] == "8081"
    names = [e["name"] for e in _containers(make_runtime())["runtimed"]["env"]]
    assert names.index("POD_IP") < names.index("RUNTIME_SERVER_ADDRESS")  # $(POD_IP) expands


def test_labels_gate_workspace_capacity_and_service_account() -> None:
    deployment = desired_deployment(make_runtime(runs=4, extra={"gpu": 1}))
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"] == {"team": "a", RUNTIME_LABEL: "python"}
    assert deployment["spec"]["selector"] == {"matchLabels": {RUNTIME_LABEL: "python"}}
    assert json.loads(template["metadata"]["annotations"][CAPACITY_ANNOTATION]) == {
        "runs": 4,
        "gpu": 1,
    }
    spec = template["spec"]
    assert spec["readinessGates"] == [{"conditionType": RUNTIMED_READY_POD_CONDITION}]
    assert {"name": "workspace", "emptyDir": {}} in spec["volumes"]
    for container in spec["containers"]:
        assert {"name": "workspace", "mountPath": "/kruntimes/workspace"} in container[
            "volumeMounts"
        ]
    assert spec["serviceAccountName"] == "runtime-python"
    assert deployment["spec"]["replicas"] == 2


def test_default_capacity_annotation_is_two_runs() -> None:
    deployment = desired_deployment(make_runtime(runs=None))
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert json.loads(annotations[CAPACITY_ANNOTATION]) == {"runs": 2}


def test_user_cannot_override_runtime_label_or_duplicate_gate() -> None:
    data = runtime_dict()
    data["spec"]["template"]["metadata"]["labels"][RUNTIME_LABEL] = "other"
    data["spec"]["template"]["spec"]["readinessGates"] = [
        {"conditionType": RUNTIMED_READY_POD_CONDITION}
    ]
    spec = desired_deployment(Runtime.from_dict(data))["spec"]["template"]
    assert spec["metadata"]["labels"][RUNTIME_LABEL] == "python"
    assert len(spec["spec"]["readinessGates"]) == 1


def test_reserved_container_name_rejected() -> None:
    data = runtime_dict()
    data["spec"]["template"]["spec"]["containers"].append({"name": "runtimed", "image": "x"})
    with pytest.raises(ValueError, match="reserved"):
        desired_deployment(Runtime.from_dict(data))


def test_reserved_init_container_name_rejected() -> None:
    """Pod validation refuses a name shared by a container and an init container."""
    data = runtime_dict()
    data["spec"]["template"]["spec"]["initContainers"] = [{"name": "runtimed", "image": "x"}]
    with pytest.raises(ValueError, match='initContainers: the name "runtimed" is reserved'):
        desired_deployment(Runtime.from_dict(data))


def test_no_containers_rejected() -> None:
    data = runtime_dict()
    data["spec"]["template"]["spec"]["containers"] = []
    with pytest.raises(ValueError, match="at least one container"):
        desired_deployment(Runtime.from_dict(data))


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (5, "spec.template.metadata must be an object"),
        ({"labels": 5}, "spec.template.metadata.labels must be a map of strings"),
        ({"labels": {"a": 1}}, "spec.template.metadata.labels must be a map of strings"),
        ({"annotations": ["a"]}, "spec.template.metadata.annotations must be a map of strings"),
    ],
)
def test_wrong_typed_template_metadata_is_a_template_error(metadata: Any, message: str) -> None:
    """A user test: a Runtime stored with these (before the CRD typed them) made the Runtime
    loop fail with a TypeError on every retry instead of reporting InvalidTemplate."""
    data = runtime_dict()
    data["spec"]["template"]["metadata"] = metadata
    with pytest.raises(ValueError, match=message):
        desired_deployment(Runtime.from_dict(data))


def test_template_not_mutated() -> None:
    runtime = make_runtime()
    before = json.dumps(runtime.spec.template, sort_keys=True)
    desired_deployment(runtime)
    assert json.dumps(runtime.spec.template, sort_keys=True) == before


def test_service_targets_runtimed_grpc_port() -> None:
    service = desired_service(make_runtime())
    assert service["metadata"]["name"] == "runtime-python"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == {RUNTIME_LABEL: "python"}
    assert service["spec"]["ports"] == [
        {"name": "grpc", "port": 9090, "targetPort": "grpc", "protocol": "TCP"}
    ]


def test_every_object_is_owned_by_the_runtime() -> None:
    for obj in desired_objects(make_runtime()):
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [
            {
                "apiVersion": "kruntimes.io/v1alpha1",
                "kind": "Runtime",
                "name": "python",
                "uid": "uid-runtime",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert obj["metadata"]["namespace"] == "demo"
        assert DESIRED_HASH_ANNOTATION in obj["metadata"]["annotations"]


def _allowed(group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in RUNTIMED_RULES
    )


@pytest.mark.parametrize(
    ("group", "resource", "verb"),
    [
        ("kruntimes.io", "runs", "get"),
        ("kruntimes.io", "runs", "list"),
        ("kruntimes.io", "runs", "watch"),
        ("kruntimes.io", "runs", "patch"),
        ("kruntimes.io", "runs/status", "update"),
        ("", "pods", "watch"),
        ("", "pods/status", "patch"),
        ("discovery.k8s.io", "endpointslices", "watch"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "events", "create"),
    ],
)
def test_role_grants_what_runtimed_needs(group: str, resource: str, verb: str) -> None:
    assert _allowed(group, resource, verb)


@pytest.mark.parametrize(
    ("group", "resource", "verb"),
    [
        ("kruntimes.io", "runs", "create"),
        ("kruntimes.io", "runs", "delete"),
        ("kruntimes.io", "runs", "update"),
        ("kruntimes.io", "runtimes", "get"),
        ("", "pods", "delete"),
        ("", "pods", "patch"),
        ("", "secrets", "get"),
        ("coordination.k8s.io", "leases", "delete"),
        ("apps", "deployments", "get"),
    ],
)
def test_role_grants_nothing_more(group: str, resource: str, verb: str) -> None:
    assert not _allowed(group, resource, verb)
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in RUNTIMED_RULES)


def test_role_binding_binds_role_to_service_account() -> None:
    binding = desired_role_binding(make_runtime())
    assert binding["roleRef"]["name"] == desired_role(make_runtime())["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "runtime-python", "namespace": "demo"}
    ]


def test_drift_detection() -> None:
    desired = desired_deployment(make_runtime())
    assert not needs_update(desired, desired)
    scaled = json.loads(json.dumps(desired))
    scaled["spec"]["replicas"] = 5
    assert needs_update(scaled, desired)
    changed = desired_deployment(make_runtime(daemon_image="other"))
    assert needs_update(desired, changed)
    unstamped = json.loads(json.dumps(desired))
    del unstamped["metadata"]["annotations"][DESIRED_HASH_ANNOTATION]
    assert needs_update(unstamped, desired)


def test_merge_for_update_keeps_identity_and_cluster_ip() -> None:
    desired = desired_service(make_runtime())
    actual = json.loads(json.dumps(desired))
    actual["metadata"].update({"resourceVersion": "7", "uid": "svc-uid"})
    actual["metadata"]["labels"]["other"] = "kept"
    actual["spec"]["clusterIP"] = "10.0.0.5"
    merged = merge_for_update(actual, desired_service(make_runtime(daemon_image="x")))
    assert merged["metadata"]["resourceVersion"] == "7"
    assert merged["metadata"]["labels"]["other"] == "kept"
    assert merged["spec"]["clusterIP"] == "10.0.0.5"


def test_status_counts_only_schedulable_pods() -> None:
    runtime = make_runtime(replicas=3)
    pods = [
        pod("a"),
        pod("b", fresh=False),
        pod("c", ready=False),
        pod("d", deleting=True),
        pod("e", runtime="bash"),
    ]
    patch = runtime_status_patch(runtime, deployment={"spec": {}}, pods=pods, now=NOW)
    assert patch["readyReplicas"] == 1
    assert patch["replicas"] == 3
    assert patch["observedGeneration"] == 1
    status = Runtime.from_dict({**runtime_dict(replicas=3), "status": patch}).status
    available = find_condition(status.conditions, "Available")
    progressing = find_condition(status.conditions, "Progressing")
    assert available is not None
    assert available.status is ConditionStatus.TRUE
    assert progressing is not None
    assert progressing.status is ConditionStatus.TRUE


def test_status_complete_and_idempotent() -> None:
    runtime = make_runtime(replicas=2)
    pods = [pod("a"), pod("b")]
    patch = runtime_status_patch(runtime, deployment={"spec": {}}, pods=pods, now=NOW)
    stored = Runtime.from_dict({**runtime_dict(replicas=2), "status": patch})
    progressing = find_condition(stored.status.conditions, "Progressing")
    assert progressing is not None
    assert progressing.status is ConditionStatus.FALSE
    assert runtime_status_patch(stored, deployment={"spec": {}}, pods=pods, now=NOW) == {}


def test_status_without_pods_is_unavailable() -> None:
    patch = runtime_status_patch(make_runtime(), deployment=None, pods=[], now=NOW)
    status = Runtime.from_dict({**runtime_dict(), "status": patch}).status
    available = find_condition(status.conditions, "Available")
    assert available is not None
    assert available.status is ConditionStatus.FALSE
    assert available.reason == "DeploymentMissing"


# ------------------------------------------------ installation wiring of runtimed (issue 8/9)

WIRING = RuntimedWiring(
    gateway_url="https://runtime-gateway.kruntimes-system.svc.cluster.local",
    gateway_ca_configmap="kruntimes-gateway-ca",
    peer_tls_secret="kruntimes-peer-tls",
)


def _pod_spec(wiring: RuntimedWiring | None) -> dict[str, Any]:
    spec: dict[str, Any] = desired_deployment(make_runtime(), wiring)["spec"]["template"]["spec"]
    return spec


def test_without_wiring_runtimed_gets_no_gateway_or_peer_settings() -> None:
    for wiring in (None, RuntimedWiring()):
        spec = _pod_spec(wiring)
        runtimed = next(c for c in spec["containers"] if c["name"] == "runtimed")
        names = {e["name"] for e in runtimed["env"]}
        assert not names & {
            "RUNTIMED_GATEWAY_URL",
            "RUNTIMED_GATEWAY_CA_FILE",
            "RUNTIMED_PEER_TLS_DIR",
        }
        assert [v["name"] for v in spec["volumes"]] == ["workspace", "kruntimes-runtimed-tmp"]
        assert [m["name"] for m in runtimed["volumeMounts"]] == [
            "workspace",
            "kruntimes-runtimed-tmp",
        ]


def test_wiring_reaches_runtimed_as_env_and_optional_read_only_volumes() -> None:
    spec = _pod_spec(WIRING)
    runtimed = next(c for c in spec["containers"] if c["name"] == "runtimed")
    env = {e["name"]: e.get("value") for e in runtimed["env"]}
    assert env["RUNTIMED_GATEWAY_URL"] == WIRING.gateway_url
    assert env["RUNTIMED_GATEWAY_CA_FILE"] == "/etc/kruntimes/gateway-ca/ca.crt"
    assert env["RUNTIMED_PEER_TLS_DIR"] == "/etc/kruntimes/peer-tls"
    assert {
        "name": "kruntimes-gateway-ca",
        "mountPath": "/etc/kruntimes/gateway-ca",
        "readOnly": True,
    } in runtimed["volumeMounts"]
    assert {
        "name": "kruntimes-peer-tls",
        "mountPath": "/etc/kruntimes/peer-tls",
        "readOnly": True,
    } in runtimed["volumeMounts"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["kruntimes-gateway-ca"]["configMap"] == {
        "name": "kruntimes-gateway-ca",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
        "optional": True,
    }
    assert volumes["kruntimes-peer-tls"]["secret"] == {
        "secretName": "kruntimes-peer-tls",
        "defaultMode": 0o444,
        "optional": True,
    }
    # only runtimed sees the material: the Runtime Server container does not
    runtime = next(c for c in spec["containers"] if c["name"] == "runtime")
    assert {m["name"] for m in runtime["volumeMounts"]} == {"workspace"}


def test_each_wiring_setting_alone_adds_only_its_own_part() -> None:
    only_url = _pod_spec(RuntimedWiring(gateway_url="https://gw.example:8443"))
    assert [v["name"] for v in only_url["volumes"]] == ["workspace", "kruntimes-runtimed-tmp"]
    only_peer = _pod_spec(RuntimedWiring(peer_tls_secret="peer"))
    assert [v["name"] for v in only_peer["volumes"]] == [
        "workspace",
        "kruntimes-runtimed-tmp",
        "kruntimes-peer-tls",
    ]
    runtimed = next(c for c in only_peer["containers"] if c["name"] == "runtimed")
    assert "RUNTIMED_GATEWAY_CA_FILE" not in {e["name"] for e in runtimed["env"]}


@pytest.mark.parametrize(
    "change",
    [
        {"gateway_url": "https://other-gateway.example"},
        {"gateway_ca_configmap": "other-ca"},
        {"peer_tls_secret": "other-peer"},
        {"peer_tls_secret": None},
    ],
)
def test_changing_any_wiring_setting_rolls_the_pods(change: dict[str, Any]) -> None:
    before = desired_deployment(make_runtime(), WIRING)
    after = desired_deployment(make_runtime(), dataclasses.replace(WIRING, **change))
    assert needs_update(before, after)
    assert needs_update(after, before)
    # and the same settings do not
    assert not needs_update(before, desired_deployment(make_runtime(), WIRING))


def test_desired_objects_pass_the_wiring_to_the_deployment() -> None:
    deployment = desired_objects(make_runtime(), WIRING)[-1]
    assert deployment["kind"] == "Deployment"
    names = [v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]]
    assert "kruntimes-peer-tls" in names
    assert "kruntimes-gateway-ca" in names


@pytest.mark.parametrize(
    "name", ["kruntimes-gateway-ca", "kruntimes-peer-tls", "kruntimes-runtimed-tmp"]
)
def test_template_volume_with_a_reserved_name_is_rejected(name: str) -> None:
    data = runtime_dict()
    data["spec"]["template"]["spec"]["volumes"] = [{"name": name, "emptyDir": {}}]
    with pytest.raises(ValueError, match=f'"{name}" is reserved'):
        desired_deployment(Runtime.from_dict(data), WIRING)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gateway_url": "runtime-gateway:443"}, "gateway URL"),
        ({"gateway_url": "https://gw.example/?q=1"}, "gateway URL"),
        ({"gateway_ca_configmap": "Not_A_Name"}, "gateway CA ConfigMap name"),
        ({"peer_tls_secret": "x" * 254}, "peer TLS Secret name"),
        ({"peer_tls_secret": ""}, "peer TLS Secret name"),
    ],
)
def test_bad_wiring_is_refused_naming_the_setting(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RuntimedWiring(**fields)


def test_controlplane_cli_turns_flags_and_env_into_the_wiring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    import krt.controlplane.__main__ as cli

    seen: list[Any] = []
    monkeypatch.setattr(cli.trio, "run", lambda _fn, _kc, _ctx, config: seen.append(config))
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)
    result = CliRunner().invoke(
        cli.main,
        ["--no-leader-elect", "--gateway-url", "https://gw.example:8443"],
        env={
            "KRT_CONTROLPLANE_GATEWAY_CA_CONFIGMAP": "gw-ca",
            "KRT_CONTROLPLANE_PEER_TLS_SECRET": "peer",
        },
    )
    assert result.exit_code == 0, result.output
    assert seen[0].runtimed == RuntimedWiring(
        gateway_url="https://gw.example:8443", gateway_ca_configmap="gw-ca", peer_tls_secret="peer"
    )
    default = CliRunner().invoke(cli.main, ["--no-leader-elect"], env={})
    assert default.exit_code == 0, default.output
    assert seen[1].runtimed == RuntimedWiring()
    bad = CliRunner().invoke(cli.main, ["--peer-tls-secret", "Bad_Name"])
    assert bad.exit_code == 2
    assert "peer TLS Secret name 'Bad_Name'" in bad.output


def test_controlplane_cli_takes_runtimed_resources_as_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    import krt.controlplane.__main__ as cli

    seen: list[Any] = []
    monkeypatch.setattr(cli.trio, "run", lambda _fn, _kc, _ctx, config: seen.append(config))
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)
    custom = CliRunner().invoke(
        cli.main,
        ["--no-leader-elect", '--runtimed-resources={"requests":{"cpu":"100m"}}'],
    )
    assert custom.exit_code == 0, custom.output
    assert seen[0].runtimed.resources == {"requests": {"cpu": "100m"}}
    by_env = CliRunner().invoke(
        cli.main, ["--no-leader-elect"], env={"KRT_CONTROLPLANE_RUNTIMED_RESOURCES": "{}"}
    )
    assert by_env.exit_code == 0, by_env.output
    assert seen[1].runtimed.resources == {}
    bad = CliRunner().invoke(cli.main, ["--runtimed-resources", '{"limits":{"memory":"lots"}}'])
    assert bad.exit_code == 2
    assert "runtimed resources: limits.memory: 'lots' is not a quantity" in bad.output
    not_json = CliRunner().invoke(cli.main, ["--runtimed-resources", "cpu=1"])
    assert not_json.exit_code == 2
    assert "runtimed resources: not JSON" in not_json.output


RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


def test_repair_keeps_a_rollout_restart() -> None:
    """`kubectl rollout restart` survives the next repair of the Deployment (T2 F15).

    The restart annotates the live Pod template; a repair (here: replicas drifted) must not
    drop it, or the Deployment rolls back to the pre-restart ReplicaSet.
    """
    desired = desired_deployment(make_runtime())
    live = json.loads(json.dumps(desired))
    live["metadata"]["resourceVersion"] = "9"
    live["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT] = "2026-11-30T05:00:00Z"
    assert not needs_update(live, desired)  # the restart alone is no drift
    live["spec"]["replicas"] = 5  # `kubectl scale deployment`, an HPA, ...
    assert needs_update(live, desired)
    merged = merge_for_update(live, desired)
    annotations = merged["spec"]["template"]["metadata"]["annotations"]
    assert annotations[RESTARTED_AT] == "2026-11-30T05:00:00Z"
    assert (
        annotations[CAPACITY_ANNOTATION]
        == desired["spec"]["template"]["metadata"]["annotations"][CAPACITY_ANNOTATION]
    )
    assert merged["spec"]["replicas"] == desired["spec"]["replicas"]
    assert RESTARTED_AT not in desired["spec"]["template"]["metadata"]["annotations"]
    # a Runtime template that sets the annotation itself wins (a restart through the Runtime)
    data = runtime_dict()
    data["spec"]["template"]["metadata"] = {"annotations": {RESTARTED_AT: "2026-12-01T00:00:00Z"}}
    own = desired_deployment(Runtime.from_dict(data))
    merged_own = merge_for_update(live, own)
    assert (
        merged_own["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT]
        == "2026-12-01T00:00:00Z"
    )
    # without a restart nothing is added
    plain = merge_for_update(desired_deployment(make_runtime(replicas=3)), desired)
    assert RESTARTED_AT not in plain["spec"]["template"]["metadata"]["annotations"]
