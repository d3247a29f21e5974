"""A list from a resourceVersion newer than the store gets kube-apiserver's exact 504.

apiserver's ``storage.NewTooLargeResourceVersionError`` is ``errors.NewTimeoutError`` (which
prefixes ``Timeout: ``) with a ``ResourceVersionTooLarge`` cause and ``retryAfterSeconds: 1``,
and ``responsewriters`` turns ``retryAfterSeconds`` into a ``Retry-After`` header; client-go's
reflector recognises the error by reason Timeout plus that cause and re-lists.
"""

from __future__ import annotations

import httpx
import pytest

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.mark.parametrize("match", ["NotOlderThan", "Exact", None])
async def test_a_future_resource_version_is_a_504_too_large(
    admin_http: httpx.AsyncClient, match: str | None
) -> None:
    await admin_http.post(CMS, json={"metadata": {"name": "x"}})
    current = int((await admin_http.get(CMS)).json()["metadata"]["resourceVersion"])
    params = {"resourceVersion": str(current + 1000)}
    if match:
        params["resourceVersionMatch"] = match
    r = await admin_http.get(CMS, params=params)
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
