"""A list from a resourceVersion newer than the store gets kube-apiserver's exact 504.

apiserver's ``storage.NewTooLargeResourceVersionError`` is ``errors.NewTimeoutError`` (which
prefixes ``Timeout: ``) with a ``ResourceVersionTooLarge`` cause and ``retryAfterSeconds: 1``,
and ``responsewriters`` turns ``retryAfterSeconds`` into a ``Retry-After`` header; client-go's
reflector recognises the error by reason Timeout plus that cause and re-lists.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from localkube import freshness, storage
from localkube.watching import FUTURE_RESOURCE_VERSION_WAIT

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.mark.parametrize("match", ["NotOlderThan", "Exact", None])
async def test_a_future_resource_version_is_a_504_too_large_after_3_s(
    admin_http: httpx.AsyncClient, match: str | None, autojump_clock: trio.abc.Clock
) -> None:
    # kube-apiserver's watch cache blocks such a LIST up to 3 s first (finding F5)
    await admin_http.post(CMS, json={"metadata": {"name": "x"}})
    current = int((await admin_http.get(CMS)).json()["metadata"]["resourceVersion"])
    params = {"resourceVersion": str(current + 1000)}
    if match:
        params["resourceVersionMatch"] = match
    start = trio.current_time()
    r = await admin_http.get(CMS, params=params)
    assert trio.current_time() - start == pytest.approx(FUTURE_RESOURCE_VERSION_WAIT, abs=0.1)
    assert r.status_code == 504
    assert r.headers["retry-after"] == "1"
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Timeout: Too large resource version: {current + 1000}, current: {current}",
        "reason": "Timeout",
        "details": {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    }


async def test_other_errors_carry_no_retry_after(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.get(f"{CMS}/missing")
    assert r.status_code == 404
    assert "retry-after" not in r.headers


@pytest.mark.parametrize("match", ["NotOlderThan", "Exact"])
async def test_a_list_waits_for_a_future_resource_version_that_arrives(
    admin_http: httpx.AsyncClient, match: str, autojump_clock: trio.abc.Clock
) -> None:
    created = (await admin_http.post(CMS, json={"metadata": {"name": "a"}})).json()
    wanted = int(created["metadata"]["resourceVersion"]) + 1
    answer: list[httpx.Response] = []

    async def list_at_future() -> None:
        params = {"resourceVersion": str(wanted), "resourceVersionMatch": match}
        answer.append(await admin_http.get(CMS, params=params))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(list_at_future)
        await trio.sleep(1)
        assert answer == []  # still waiting
        await admin_http.post(CMS, json={"metadata": {"name": "b"}})
        start = trio.current_time()
    assert trio.current_time() - start < 0.5
    [r] = answer
    assert r.status_code == 200, r.text
    served = int(r.json()["metadata"]["resourceVersion"])
    assert served == wanted if match == "Exact" else served >= wanted
    assert "a" in [i["metadata"]["name"] for i in r.json()["items"]]


async def test_reach_revision_wakes_only_at_the_revision(autojump_clock: trio.abc.Clock) -> None:
    store = storage.open_store(None)
    target = store.revision + 3
    reached_at: list[int] = []

    async def wait() -> None:
        await freshness.reach_revision(store, target)
        reached_at.append(store.revision)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        for index in range(5):
            await trio.sleep(1)
            store.create(("/configmaps", "ns", f"c{index}"), {"metadata": {"name": f"c{index}"}})
    assert reached_at == [target]
    with trio.move_on_after(0):  # already reached: returns without waiting
        await freshness.reach_revision(store, target)
        reached_at.append(0)
    assert reached_at == [target, 0]
