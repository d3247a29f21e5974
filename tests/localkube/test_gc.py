"""ownerReference garbage collection (issue 3): background, foreground, orphan."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio

from tests.localkube.conftest import watch_until

CM = "/api/v1/namespaces/default/configmaps"


async def _create(
    client: httpx.AsyncClient, name: str, owners: list[dict[str, Any]] | None = None, **meta: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **meta}
    if owners:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": o["metadata"]["name"],
                "uid": o["metadata"]["uid"],
                **o.get("_ref", {}),
            }
            for o in owners
        ]
    r = await client.post(CM, json={"metadata": metadata})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def _gone(client: httpx.AsyncClient, name: str) -> None:
    with trio.fail_after(5):
        await watch_until(client, CM, name, lambda obj: obj is None)


async def test_background_deletes_dependents_once_all_owners_are_gone(
    admin_http: httpx.AsyncClient,
) -> None:
    owner = await _create(admin_http, "owner")
    other = await _create(admin_http, "other")
    child = await _create(admin_http, "child", [owner])
    shared = await _create(admin_http, "shared", [owner, other])
    grandchild = await _create(admin_http, "grandchild", [child])
    await admin_http.delete(f"{CM}/owner")
    await _gone(admin_http, "child")
    await _gone(admin_http, "grandchild")
    with trio.fail_after(5):
        kept = await watch_until(
            admin_http,
            CM,
            "shared",
            lambda o: (
                o is not None and [r["name"] for r in o["metadata"]["ownerReferences"]] == ["other"]
            ),
        )
    assert kept is not None
    assert kept["metadata"]["uid"] == shared["metadata"]["uid"]
    del grandchild


async def test_foreground_waits_for_blocking_dependents(admin_http: httpx.AsyncClient) -> None:
    owner = await _create(admin_http, "owner")
    await _create(
        admin_http,
        "held",
        [{**owner, "_ref": {"blockOwnerDeletion": True}}],
        finalizers=["example.com/hold"],
    )
    r = await admin_http.request("DELETE", f"{CM}/owner", json={"propagationPolicy": "Foreground"})
    assert "foregroundDeletion" in r.json()["metadata"]["finalizers"]
    await trio.sleep(0.05)
    owner_now = (await admin_http.get(f"{CM}/owner")).json()
    assert owner_now["metadata"]["deletionTimestamp"], (
        "owner waits while a blocking dependent exists"
    )
    held = (await admin_http.get(f"{CM}/held")).json()
    assert held["metadata"]["deletionTimestamp"], "dependent deletion started"
    await admin_http.patch(
        f"{CM}/held",
        content=json.dumps({"metadata": {"finalizers": None}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    await _gone(admin_http, "held")
    await _gone(admin_http, "owner")


async def test_orphan_keeps_dependents_and_drops_the_reference(
    admin_http: httpx.AsyncClient,
) -> None:
    owner = await _create(admin_http, "owner")
    await _create(admin_http, "kid", [owner])
    await admin_http.delete(f"{CM}/owner", params={"propagationPolicy": "Orphan"})
    await _gone(admin_http, "owner")
    kid = (await admin_http.get(f"{CM}/kid")).json()
    assert "ownerReferences" not in kid["metadata"]


async def test_dependent_of_missing_owner_is_collected(admin_http: httpx.AsyncClient) -> None:
    ghost = {"metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}}
    await _create(admin_http, "orphaned", [ghost])
    await _gone(admin_http, "orphaned")


async def test_collector_recovers_after_falling_behind() -> None:
    import trio.testing

    from localkube import storage
    from localkube.deletion import Deleter
    from localkube.gc import GarbageCollector
    from localkube.handlers import utc_now
    from localkube.resources import ResourceRegistry

    store = storage.Store(storage.MemoryBackend(), watch_buffer=2)
    registry = ResourceRegistry()
    gc = GarbageCollector(store, registry, Deleter(store, registry, clock=utc_now))
    owner = store.create(
        ("/configmaps", "ns", "owner"),
        {"metadata": {"name": "owner", "namespace": "ns", "uid": "u1"}},
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(gc.run)
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u1"}
        store.create(
            ("/configmaps", "ns", "dep"),
            {"metadata": {"name": "dep", "namespace": "ns", "uid": "u2", "ownerReferences": [ref]}},
        )
        for i in range(10):  # more events than the collector's buffer, without yielding
            store.create(
                ("/configmaps", "ns", f"noise{i}"),
                {"metadata": {"name": f"noise{i}", "namespace": "ns", "uid": f"n{i}"}},
            )
        store.delete(("/configmaps", "ns", "owner"))
        await trio.testing.wait_all_tasks_blocked()
        assert store.get("/configmaps", "ns", "dep") is None, "collected after re-indexing"
        nursery.cancel_scope.cancel()
    del owner


async def test_foreground_deletion_breaks_an_ownership_cycle(
    admin_http: httpx.AsyncClient,
) -> None:
    # a owns b and b owns a, both blocking: Kubernetes' collector unblocks the dependent's
    # references before deleting it in the foreground, so neither waits for ever
    a = await _create(admin_http, "a")
    b = await _create(admin_http, "b", [{**a, "_ref": {"blockOwnerDeletion": True}}])
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "b",
        "uid": b["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    r = await admin_http.patch(
        f"{CM}/a",
        json={"metadata": {"ownerReferences": [ref]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text
    r = await admin_http.request("DELETE", f"{CM}/a", json={"propagationPolicy": "Foreground"})
    assert r.status_code == 200
    await _gone(admin_http, "a")
    await _gone(admin_http, "b")


async def test_foreground_chain_still_waits_for_the_deepest_dependent(
    admin_http: httpx.AsyncClient,
) -> None:
    top = await _create(admin_http, "top")
    middle = await _create(admin_http, "middle", [{**top, "_ref": {"blockOwnerDeletion": True}}])
    await _create(
        admin_http,
        "leaf",
        [{**middle, "_ref": {"blockOwnerDeletion": True}}],
        finalizers=["example.com/hold"],
    )
    await admin_http.request("DELETE", f"{CM}/top", json={"propagationPolicy": "Foreground"})
    with trio.fail_after(5):
        await watch_until(
            admin_http, CM, "leaf", lambda o: bool(o and o["metadata"].get("deletionTimestamp"))
        )
    await trio.sleep(0.05)
    for name in ("top", "middle"):
        assert (await admin_http.get(f"{CM}/{name}")).status_code == 200, name
    r = await admin_http.patch(
        f"{CM}/leaf",
        json={"metadata": {"finalizers": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200
    await _gone(admin_http, "middle")
    await _gone(admin_http, "top")
