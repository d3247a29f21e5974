"""A thin async Kubernetes REST layer over kr8s (``kr8s.asyncio``) for localkube's
controllers, node and proxy.

localkube's workers talk to the API server only through the Kubernetes API, like the real
kube-controller-manager, kubelet and kube-proxy. They work on plain JSON dicts and exact
REST paths (``/api/v1/namespaces/ns/pods``), which keeps list+watch, the status subresource
and conditional updates explicit; kr8s provides the authenticated HTTP session (kubeconfig,
TLS, token). kr8s's own watch restarts a 410 at the same resourceVersion forever and drops
BOOKMARKs, so :meth:`Kube.watch` reads the stream itself.

Error statuses are read here, never by kr8s (``raise_for_status=False``): on a 401 or 403
kr8s re-authenticates by closing and recreating its HTTP session, which cuts every other
request and watch sharing the ``Api``. A 403 is routine for localkube's workers (an Event
or Pod written into a terminating namespace), and one such answer used to drop every
informer's watch and the node's in-flight Pod deletions.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import kr8s


class ApiStatusError(Exception):
    """The API server answered an error Status.

    Attributes:
        code: HTTP status (404, 409, 410, 422, ...). reason: Status reason. message: text.
    """

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


def _split(path: str) -> tuple[str, str]:
    head, _, tail = path.rpartition("/")
    return head, tail


def _error(exc: kr8s.ServerError) -> ApiStatusError:
    resp = exc.response
    code = resp.status_code if resp is not None else 500
    status: dict[str, Any] = exc.status if isinstance(exc.status, dict) else {}
    return ApiStatusError(code, str(status.get("reason", "")), str(status.get("message", exc)))


def status_error(response: httpx.Response) -> ApiStatusError:
    """The :class:`ApiStatusError` for an error response (body already read)."""
    try:
        status = response.json()
    except ValueError:
        status = None
    if not isinstance(status, dict):
        return ApiStatusError(response.status_code, response.reason_phrase, response.text)
    return ApiStatusError(
        int(status.get("code") or response.status_code),
        str(status.get("reason", "")),
        str(status.get("message", response.text)),
    )


def collection_path(group_version: str, plural: str, namespace: str | None = None) -> str:
    """Return the REST path of a collection (``/apis/apps/v1/namespaces/ns/deployments``)."""
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{plural}"


def object_path(group_version: str, plural: str, namespace: str | None, name: str) -> str:
    """Return the REST path of one object."""
    return f"{collection_path(group_version, plural, namespace)}/{name}"


class Kube:
    """JSON-dict access to the API server through one kr8s API object.

    Args:
        api: a ``kr8s.asyncio.Api`` (for example ``await kr8s.asyncio.api(kubeconfig=...)``).
    """

    def __init__(self, api: Any) -> None:
        self.api = api

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """Send one request and return the decoded JSON answer.

        Raises:
            ApiStatusError: for an error status. httpx.TransportError: connection failures.
        """
        base, url = _split(path)
        kwargs: dict[str, Any] = {}
        if params:
            kwargs["params"] = dict(params)
        if body is not None:
            kwargs["content"] = json.dumps(body)
            kwargs["headers"] = {"Content-Type": content_type}
        try:
            async with self.api.call_api(
                method, version="", base=base, url=url, raise_for_status=False, **kwargs
            ) as r:
                if r.is_error:
                    raise status_error(r)
                return dict(r.json()) if r.content else {}
        except kr8s.ServerError as exc:
            raise _error(exc) from None

    async def get(self, path: str) -> dict[str, Any] | None:
        """GET an object; None if it does not exist (404)."""
        try:
            return await self.request("GET", path)
        except ApiStatusError as exc:
            if exc.code == 404:
                return None
            raise

    async def list(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """GET a collection (all pages). Returns the list object with every item."""
        query = dict(params or {})
        result = await self.request("GET", path, params=query)
        items = list(result.get("items") or [])
        while (result.get("metadata") or {}).get("continue"):
            query["continue"] = result["metadata"]["continue"]
            result = await self.request("GET", path, params=query)
            items.extend(result.get("items") or [])
        result["items"] = items
        return result

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` to a collection path."""
        return await self.request("POST", path, body=dict(body))

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT ``body`` (conditional when it carries ``metadata.resourceVersion``: 409 on a
        stale version)."""
        return await self.request("PUT", path, body=dict(body))

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch (RFC 7386)."""
        return await self.request(
            "PATCH", path, body=dict(patch), content_type="application/merge-patch+json"
        )

    async def delete(
        self, path: str, *, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """DELETE an object with optional DeleteOptions; None if it was already gone."""
        try:
            return await self.request("DELETE", path, body=dict(body) if body else None)
        except ApiStatusError as exc:
            if exc.code == 404:
                return None
            raise

    async def watch(
        self, path: str, *, resource_version: str, params: Mapping[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events (``{"type", "object"}``) from ``resource_version`` on.

        Ends when the server closes the stream. An ``ERROR`` event is raised.

        Raises:
            ApiStatusError: 410 when ``resource_version`` is too old, or any error event.
        """
        base, url = _split(path)
        query = {
            **dict(params or {}),
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
        }
        try:
            async with self.api.call_api(
                "GET",
                version="",
                base=base,
                url=url,
                params=query,
                stream=True,
                raise_for_status=False,
            ) as response:
                if response.is_error:
                    await response.aread()
                    raise status_error(response)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        raise ApiStatusError(
                            int(obj.get("code", 500)),
                            str(obj.get("reason", "")),
                            str(obj.get("message", "")),
                        )
                    yield event
        except kr8s.ServerError as exc:
            raise _error(exc) from None
        except httpx.RemoteProtocolError:
            return
