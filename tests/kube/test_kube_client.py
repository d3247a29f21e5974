"""Kube against localkube: CRUD verbs, error mapping, paging, patches, deletes, watch, config."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from conftest import CRDS, WIDGETS, service_account_token, widget
from proxy_fake import connect_proxy

from krt.kube import errors
from krt.kube.client import ConfigError, Kube, connect
from krt.kube.http11 import Http11Pool, parse_origin
from krt.kube.resources import LEASES, NAMESPACES, PODS, SELFSUBJECTACCESSREVIEWS, ResourceRef
from localkube.apiserver import ApiServerHandle


def pod(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
    }


async def test_create_get_replace_delete_roundtrip(kube: Kube) -> None:
    created = await kube.create(PODS, pod("p1"))
    assert created["apiVersion"] == "v1"
    assert created["kind"] == "Pod"
    assert created["metadata"]["uid"]
    got = await kube.get(PODS, "p1", "default")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    got["metadata"]["labels"] = {"x": "y"}
    replaced = await kube.replace(PODS, got)
    assert replaced["metadata"]["labels"] == {"x": "y"}
    assert replaced["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]
    await kube.delete(PODS, "p1", "default", grace_period_seconds=0)
    with pytest.raises(errors.NotFound) as info:
        await kube.get(PODS, "p1", "default")
    assert info.value.code == 404
    assert info.value.reason == "NotFound"


async def test_cluster_scoped_get(kube: Kube) -> None:
    ns = await kube.get(NAMESPACES, "default")
    assert ns["metadata"]["name"] == "default"


async def test_status_errors_map_to_classes(kube: Kube) -> None:
    await kube.create(PODS, pod("p1"))
    with pytest.raises(errors.AlreadyExists) as exists:
        await kube.create(PODS, pod("p1"))
    assert exists.value.code == 409
    assert not isinstance(exists.value, errors.Conflict)

    stale = await kube.get(PODS, "p1", "default")
    fresh = dict(stale, metadata={**stale["metadata"], "labels": {"a": "b"}})
    await kube.replace(PODS, fresh)
    with pytest.raises(errors.Conflict) as conflict:
        await kube.replace(PODS, stale)
    assert conflict.value.reason == "Conflict"

    bad = pod("Bad_Name")
    with pytest.raises(errors.Invalid) as invalid:
        await kube.create(PODS, bad)
    assert invalid.value.code == 422
    assert any(c.field == "metadata.name" for c in invalid.value.causes)

    with pytest.raises(errors.NotFound):
        await kube.get(ResourceRef("nope.example", "v1", "things", True, "Thing"), "x", "default")


async def test_forbidden_and_unauthorized(apiserver: ApiServerHandle, tmp_path: Path) -> None:
    text = apiserver.kubeconfig_path.read_text().replace(apiserver.admin_token, "not-a-token")
    bad = tmp_path / "kubeconfig"
    bad.write_text(text)
    with pytest.raises(errors.Unauthorized) as info:
        await connect(kubeconfig=bad)
    assert info.value.code == 401


async def test_forbidden_without_retries(kube: Kube) -> None:
    nobody = kube.with_token(await service_account_token(kube, "nobody"))
    before = kube.requests + nobody.requests
    with pytest.raises(errors.Forbidden) as info:
        await nobody.get(PODS, "x", "default")
    assert info.value.code == 403
    assert kube.requests + nobody.requests == before + 1  # 403 is final: no re-auth loop


async def test_list_pages_and_selectors(kube: Kube) -> None:
    for i in range(7):
        await kube.create(PODS, pod(f"p{i}", app="a" if i % 2 else "b"))
    items, rv = await kube.list(PODS, "default", page_size=2)
    assert sorted(i["metadata"]["name"] for i in items) == [f"p{i}" for i in range(7)]
    assert all(i["kind"] == "Pod" and i["apiVersion"] == "v1" for i in items)
    assert rv
    selected, _ = await kube.list(PODS, "default", label_selector="app=a", page_size=2)
    assert sorted(i["metadata"]["name"] for i in selected) == ["p1", "p3", "p5"]
    by_field, _ = await kube.list(PODS, None, field_selector="metadata.name=p4")
    assert [i["metadata"]["name"] for i in by_field] == ["p4"]
    with pytest.raises(ValueError, match="page_size"):
        await kube.list(PODS, "default", page_size=0)


async def test_patch_types(kube: Kube) -> None:
    await kube.create(PODS, pod("p1"))
    merged = await kube.patch(PODS, "p1", "default", {"metadata": {"labels": {"m": "1"}}})
    assert merged["metadata"]["labels"]["m"] == "1"
    jsoned = await kube.patch(
        PODS,
        "p1",
        "default",
        [{"op": "add", "path": "/metadata/annotations", "value": {"j": "2"}}],
        type="json",
    )
    assert jsoned["metadata"]["annotations"] == {"j": "2"}
    failed_test = [{"op": "test", "path": "/metadata/annotations/j", "value": "other"}]
    with pytest.raises(errors.ApiError) as info:
        await kube.patch(PODS, "p1", "default", failed_test, type="json")
    assert info.value.code in (409, 422)
    stale_rv = {"metadata": {"resourceVersion": merged["metadata"]["resourceVersion"]}}
    with pytest.raises(errors.Conflict):
        await kube.patch(PODS, "p1", "default", stale_rv)
    with pytest.raises(ValueError, match="json patch must be a list"):
        await kube.patch(PODS, "p1", "default", {"a": 1}, type="json")
    with pytest.raises(ValueError, match="patch type"):
        await kube.patch(PODS, "p1", "default", {}, type="apply")  # type: ignore[arg-type]


async def test_delete_preconditions(kube: Kube) -> None:
    created = await kube.create(PODS, pod("p1"))
    with pytest.raises(errors.Conflict):
        await kube.delete(PODS, "p1", "default", preconditions={"uid": "not-the-uid"})
    await kube.get(PODS, "p1", "default")  # still there
    await kube.delete(
        PODS,
        "p1",
        "default",
        preconditions={"uid": created["metadata"]["uid"]},
        propagation_policy="Background",
        grace_period_seconds=0,
    )
    with pytest.raises(errors.NotFound):
        await kube.delete(PODS, "p1", "default")
    with pytest.raises(ValueError, match="propagation_policy"):
        await kube.delete(PODS, "p1", "default", propagation_policy="Sometimes")
    with pytest.raises(ValueError, match="unknown keys"):
        await kube.delete(PODS, "p1", "default", preconditions={"name": "p1"})


async def test_replace_requires_resource_version_and_address(kube: Kube) -> None:
    with pytest.raises(ValueError, match="resourceVersion is required"):
        await kube.replace(PODS, pod("p1"))
    with pytest.raises(ValueError, match="metadata.namespace is required"):
        await kube.create(PODS, {"metadata": {"name": "x"}})
    with pytest.raises(ValueError, match="namespace is required"):
        await kube.get(PODS, "x")
    with pytest.raises(ValueError, match="cluster-scoped"):
        await kube.get(NAMESPACES, "default", "default")
    assert kube.requests == 0  # bad input never reached the server


async def test_watch_events_and_bookmarks(kube: Kube) -> None:
    _, rv = await kube.list(PODS, "default")
    seen: list[tuple[str, str]] = []
    bookmark_rv = ""
    with trio.fail_after(10):
        async with aclosing(kube.watch(PODS, "default", rv, timeout_seconds=30)) as events:
            await kube.create(PODS, pod("w1"))
            await kube.patch(PODS, "w1", "default", {"metadata": {"labels": {"a": "b"}}})
            await kube.delete(PODS, "w1", "default", grace_period_seconds=0)
            async for kind, obj in events:
                if kind == "BOOKMARK":
                    bookmark_rv = obj["metadata"]["resourceVersion"]
                    break
                seen.append((kind, obj["metadata"]["name"]))
    assert seen[:2] == [("ADDED", "w1"), ("MODIFIED", "w1")]
    assert ("DELETED", "w1") in seen
    assert int(bookmark_rv) >= int(rv)  # the 1 s bookmark interval of the fixture


async def _drain(events: AsyncGenerator[tuple[str, dict[str, Any]], None]) -> None:
    async with aclosing(events) as stream:
        async for _ in stream:
            pass


async def test_watch_from_compacted_version_is_gone(
    start_kube: Any,
) -> None:
    async with start_kube(history_limit=3) as kube:
        for i in range(6):
            await kube.create(PODS, pod(f"g{i}"))
        with pytest.raises(errors.Gone) as info, trio.fail_after(10):
            await _drain(kube.watch(PODS, "default", "2"))
        assert info.value.code == 410


async def test_watch_stream_ends_at_server_timeout(kube: Kube) -> None:
    _, rv = await kube.list(PODS, "default")
    with trio.fail_after(10):
        async with aclosing(
            kube.watch(PODS, "default", rv, timeout_seconds=1, bookmarks=False)
        ) as events:
            assert [e async for e in events] == []


async def test_self_subject_access_review(kube: Kube) -> None:
    review = await kube.create(
        SELFSUBJECTACCESSREVIEWS,
        {
            "metadata": {},
            "spec": {
                "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "default"}
            },
        },
    )
    assert review["status"]["allowed"] is True


async def test_custom_resource_status_subresource(kube: Kube, widgets: ResourceRef) -> None:
    created = await kube.create(WIDGETS, widget("w1", size=1))
    created["status"] = {"phase": "Ready"}
    created["spec"] = {"size": 99}  # ignored by the status endpoint
    stored = await kube.replace_status(WIDGETS, created)
    assert stored["status"] == {"phase": "Ready"}
    assert stored["spec"] == {"size": 1}


async def test_leases_resource(kube: Kube) -> None:
    lease = await kube.create(
        LEASES,
        {"metadata": {"name": "l1", "namespace": "default"}, "spec": {"holderIdentity": "a"}},
    )
    assert lease["kind"] == "Lease"


async def test_connect_in_cluster_from_serviceaccount_files(
    apiserver: ApiServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(apiserver.admin_token)
    (sa / "ca.crt").write_bytes(apiserver.ca_pem)
    (sa / "namespace").write_text("kube-system\n")
    host, port = apiserver.url.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    kube = await connect(serviceaccount_dir=sa)
    try:
        assert kube.namespace == "kube-system"
        await kube.get(NAMESPACES, "kube-system")
    finally:
        await kube.aclose()


async def test_rotated_serviceaccount_token_is_reloaded_on_401(
    apiserver: ApiServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(apiserver.admin_token)
    (sa / "ca.crt").write_bytes(apiserver.ca_pem)
    (sa / "namespace").write_text("default")
    host, port = apiserver.url.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    kube = await connect(serviceaccount_dir=sa)
    try:
        # the client still holds an expired token; the file holds the current one
        kube.api.auth.token = "expired"
        before = kube.requests
        await kube.get(NAMESPACES, "default")
        assert kube.requests == before + 2  # one 401, one retry with the reloaded token
        await kube.get(NAMESPACES, "default")
        assert kube.requests == before + 3  # the new token sticks
    finally:
        await kube.aclose()


async def test_connect_without_any_config_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="not in a cluster"):
        await connect(serviceaccount_dir=tmp_path / "no-sa")
    with pytest.raises(ConfigError, match="does not exist"):
        await connect(kubeconfig=tmp_path / "nope")


async def test_connect_unknown_context(apiserver: ApiServerHandle) -> None:
    with pytest.raises(ConfigError, match="context"):
        await connect(kubeconfig=apiserver.kubeconfig_path, context="no-such-context")


async def test_connection_refused_is_connection_failed(kube: Kube) -> None:
    kube.api.auth.server = "https://127.0.0.1:1"  # nothing listens on port 1
    await kube.aclose()  # the next call opens a new session against the dead address
    with pytest.raises(errors.ConnectionFailed):
        await kube.get(PODS, "x", "default")
    assert errors.is_transient(errors.ConnectionFailed("x"))


async def test_roundtrip_latency(kube: Kube, widgets: ResourceRef) -> None:
    """Report create/get/replace_status round trips (a budget, not a benchmark)."""
    n = 50
    start = time.perf_counter()
    for i in range(n):
        await kube.create(WIDGETS, widget(f"perf{i}"))
        obj = await kube.get(WIDGETS, f"perf{i}", "default")
        obj["status"] = {"phase": "Ready"}
        await kube.replace_status(WIDGETS, obj)
    per_trip = (time.perf_counter() - start) / n
    print(f"create+get+replace_status: {per_trip * 1000:.2f} ms per round trip")


async def test_runs_and_runtimes_refs_match_the_crds(kube: Kube) -> None:

    from krt.api import crds
    from krt.kube.resources import RUNS, RUNTIMES

    for crd, ref in ((crds.run_crd(), RUNS), (crds.runtime_crd(), RUNTIMES)):
        names = crd["spec"]["names"]
        assert (names["plural"], names["kind"]) == (ref.plural, ref.kind)
        assert crd["spec"]["group"] == ref.group
        await kube.create(CRDS, crd)
        with trio.fail_after(10):
            while True:
                try:
                    items, _ = await kube.list(ref, "default")
                    break
                except errors.NotFound:
                    await trio.sleep(0.01)
        assert items == []


async def test_idle_connections_stay_open_beside_many_watches(kube: Kube) -> None:
    """With 22 watches open, a burst's connections are kept and reused.

    (httpx's default pool closed every idle connection once it held more than 20, watches
    included, encode/httpcore#1000, so each request of the next burst opened and
    TLS-handshaked anew; the client's own pool must keep them.)
    """
    pool = await kube._transport.pool()
    _, rv = await kube.list(PODS, "default")

    async def burst() -> None:
        async with trio.open_nursery() as burst_nursery:
            for _ in range(5):
                burst_nursery.start_soon(kube.list, PODS, "default")

    async def watch_forever() -> None:
        await _drain(kube.watch(PODS, "default", rv, timeout_seconds=60, bookmarks=False))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for _ in range(22):
                nursery.start_soon(watch_forever)
            while pool.active_connections < 22:  # noqa: ASYNC110 - no event for "streaming"
                await trio.sleep(0.01)
            await burst()
            opened = pool.connections_opened
            assert pool.idle_connections >= 1  # the burst's connections are still there, idle
            await burst()
            assert pool.connections_opened == opened  # reused, none opened anew
            nursery.cancel_scope.cancel()


async def test_kr8s_session_keeps_all_connections_alive(kube: Kube) -> None:
    """kr8s's own session (``kube.api``, used by callers of kr8s) keeps every idle connection."""
    async with kube.api.call_api("GET", version="", base="/version") as response:
        assert response.status_code == 200
    pool = kube.api._session._transport._pool
    assert pool._max_keepalive_connections == pool._max_connections


async def test_token_view_shares_the_pool_and_sends_its_token(kube: Kube) -> None:
    token = await service_account_token(kube, "viewer")
    view = kube.with_token(token)
    pool = await kube._transport.pool()
    before = pool.connections_opened
    with pytest.raises(errors.Forbidden):
        await view.get(PODS, "x", "default")  # the ServiceAccount has no RBAC grant
    await kube.get(NAMESPACES, "default")  # the admin's own token still works
    assert pool.connections_opened == before  # one shared, reused connection
    await view.aclose()  # a view does not close the shared pool
    await kube.get(NAMESPACES, "default")
    assert not pool.closed


async def test_kubeconfig_proxy_url_is_tunnelled(
    apiserver: ApiServerHandle, tmp_path: Path
) -> None:
    """A kubeconfig ``proxy-url`` (with credentials) carries every request through CONNECT."""
    config = yaml.safe_load(apiserver.kubeconfig_path.read_text())
    async with connect_proxy() as proxy:
        config["clusters"][0]["cluster"]["proxy-url"] = f"http://me:s%40cret@127.0.0.1:{proxy.port}"
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        kube = await connect(kubeconfig=path)
        try:
            await kube.get(NAMESPACES, "default")
        finally:
            await kube.aclose()
        assert proxy.tunnels == [apiserver.url.removeprefix("https://")]
        assert proxy.authorizations == ["Basic " + base64.b64encode(b"me:s@cret").decode()]


async def test_https_proxy_environment_never_proxies_a_loopback_api_server(
    apiserver: ApiServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like kubectl (Go's httpproxy), a machine-wide ``HTTPS_PROXY`` is not used for a local
    cluster, with or without ``NO_PROXY`` (a kubeconfig ``proxy-url`` still is, above)."""
    async with connect_proxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        for no_proxy in ("", "example.com"):
            monkeypatch.setenv("NO_PROXY", no_proxy)
            kube = await connect(kubeconfig=apiserver.kubeconfig_path)
            try:
                await kube.get(NAMESPACES, "default")
            finally:
                await kube.aclose()
        assert proxy.tunnels == []


@pytest.mark.parametrize(
    ("server", "no_proxy", "proxied"),
    [
        ("https://api.example.com:6443", "", True),
        ("https://api.example.com:6443", "example.com", False),
        ("https://10.96.0.1", "", True),
        ("https://10.96.0.1", "10.0.0.0/8", False),
        ("https://127.0.0.1:6443", "", False),
        ("https://127.3.4.5:6443", "", False),
        ("https://localhost:6443", "", False),
        ("https://[::1]:6443", "", False),
        ("http://api.example.com", "", False),  # HTTPS_PROXY is for https servers
    ],
)
def test_https_proxy_environment_applies_to_remote_https_servers_unless_no_proxy(
    server: str, no_proxy: str, proxied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from krt.kube.client import _environment_proxy

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.com:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    got = _environment_proxy(parse_origin(server))
    assert got == ("http://proxy.example.com:3128" if proxied else None)


@pytest.mark.parametrize(
    ("host", "no_proxy", "exempt"),
    [
        ("api.example.com", "", False),
        ("api.example.com", "*", True),
        ("api.example.com", "example.com", True),
        ("api.example.com", ".example.com", True),
        ("api.example.com", "other.com, example.org", False),
        ("notexample.com", "example.com", False),
        ("10.96.0.1", "10.0.0.0/8", True),
        ("10.96.0.1", "10.96.0.1", True),
        ("10.96.0.1", "192.168.0.0/16,example.com", False),
        ("::1", "::1", True),
    ],
)
def test_no_proxy_matching(host: str, no_proxy: str, exempt: bool) -> None:
    from krt.kube.client import _no_proxy

    assert _no_proxy(host, no_proxy) is exempt


async def test_concurrent_first_requests_share_one_pool(
    apiserver: ApiServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    used: set[int] = set()
    original = Http11Pool.request

    async def spy(self: Http11Pool, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        used.add(id(self))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Http11Pool, "request", spy)
    kube = await connect(kubeconfig=apiserver.kubeconfig_path)
    try:
        await kube.aclose()  # the next requests build the pool again, all at once
        used.clear()
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(kube.get, NAMESPACES, "default")
        pool = await kube._transport.pool()
        assert used == {id(pool)}  # one pool, which aclose() will close
    finally:
        await kube.aclose()
    assert pool.closed


async def test_idle_connections_outlive_a_quiet_spell_between_bursts(kube: Kube) -> None:
    """A burst's connections are kept for the next burst a few seconds later (httpx's 5 s
    expiry made a task burst after a quiet pool pay a TLS handshake per writer), and the
    client lets go of them before localkube's server-side idle timeout would."""
    from krt.kube.client import IDLE_CONNECTION_SECONDS
    from localkube.http_server import KEEP_ALIVE_SECONDS

    pool = await kube._transport.pool()
    assert pool._keepalive_expiry == IDLE_CONNECTION_SECONDS
    assert 30.0 <= IDLE_CONNECTION_SECONDS < KEEP_ALIVE_SECONDS
