"""The function endpoint: the one place its path is built and parsed.

Seed 000, Invoke Contract, and DESIGN.md "Wire contracts": a function Run is invoked with
``POST /v1/namespaces/{namespace}/runtimes/{runtime}/functions/{uid}:invoke``. runtimed
publishes ``status.endpoint.url`` = gateway base URL + :func:`function_endpoint_path`, and the
gateway routes with :func:`parse_function_endpoint_path`; both use this module, so the URL a
client posts to is exactly the one the gateway understands. The Run UID (not its name) is in
the path so a deleted Run's name cannot address a newer Run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from krt.api.errors import EndpointPathError
from krt.api.limits import (
    DNS_LABEL_MAX_CHARS,
    DNS_LABEL_PATTERN,
    MAX_ENDPOINT_URL_BYTES,
    UID_PATTERN,
)

_LABEL: Final = re.compile(DNS_LABEL_PATTERN)
_UID: Final = re.compile(UID_PATTERN)
_PATH: Final = re.compile(
    r"^/v1/namespaces/(?P<namespace>[^/]+)/runtimes/(?P<runtime>[^/]+)"
    r"/functions/(?P<uid>[^/:]+):invoke$"
)


@dataclass(frozen=True, slots=True)
class FunctionEndpointRef:
    """What an endpoint path addresses: a function Run by namespace, Runtime and Run UID."""

    namespace: str
    runtime: str
    uid: str


def _check(ref: FunctionEndpointRef) -> None:
    for field, value in (("namespace", ref.namespace), ("runtime", ref.runtime)):
        if len(value) > DNS_LABEL_MAX_CHARS or not _LABEL.fullmatch(value):
            raise EndpointPathError(
                field, f"{value!r} is not a DNS-1123 label (lowercase, digits, '-', <= 63)"
            )
    if not _UID.fullmatch(ref.uid):
        raise EndpointPathError("uid", f"{ref.uid!r} is not a Kubernetes UID")


def function_endpoint_path(namespace: str, runtime: str, uid: str) -> str:
    """Build the invoke path of a function Run.

    Args:
        namespace: the Run's namespace (DNS-1123 label).
        runtime: ``spec.runtime`` (DNS-1123 label).
        uid: ``metadata.uid`` of the Run.

    Returns:
        ``/v1/namespaces/{namespace}/runtimes/{runtime}/functions/{uid}:invoke``.

    Raises:
        EndpointPathError: a component is not a valid name or UID (so nothing needs escaping).
    """
    ref = FunctionEndpointRef(namespace, runtime, uid)
    _check(ref)
    return f"/v1/namespaces/{namespace}/runtimes/{runtime}/functions/{uid}:invoke"


def parse_function_endpoint_path(path: str) -> FunctionEndpointRef:
    """Parse an invoke path (as a request line carries it, without query string).

    Args:
        path: e.g. ``/v1/namespaces/demo/runtimes/python/functions/2c24...:invoke``.

    Returns:
        The namespace, Runtime and Run UID it addresses.

    Raises:
        EndpointPathError: the path has another shape or a component is invalid.
    """
    match = _PATH.fullmatch(path)
    if match is None:
        raise EndpointPathError(
            "path",
            f"{path[:200]!r} is not /v1/namespaces/{{namespace}}/runtimes/{{runtime}}"
            "/functions/{uid}:invoke",
        )
    ref = FunctionEndpointRef(match["namespace"], match["runtime"], match["uid"])
    _check(ref)
    return ref


def function_endpoint_url(base_url: str, namespace: str, runtime: str, uid: str) -> str:
    """Build ``status.endpoint.url``: the gateway's base URL plus the invoke path.

    Args:
        base_url: ``https://runtime-gateway.kruntimes-system.svc.cluster.local`` (optionally
            with a port or a path prefix; a trailing ``/`` is ignored).
        namespace: the Run's namespace.
        runtime: ``spec.runtime``.
        uid: the Run UID.

    Returns:
        The absolute URL, ASCII, at most :data:`~krt.api.limits.MAX_ENDPOINT_URL_BYTES` bytes.

    Raises:
        EndpointPathError: ``base_url`` is not an absolute http(s) URL without query or
            fragment, is not ASCII, a component is invalid, or the result exceeds 2048 bytes.
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise EndpointPathError("baseURL", f"{base_url!r} is not an absolute http(s) URL")
    if parts.query or parts.fragment:
        raise EndpointPathError("baseURL", f"{base_url!r} must not have a query or fragment")
    if not base_url.isascii():
        raise EndpointPathError("baseURL", f"{base_url!r} must be ASCII")
    url = base_url.rstrip("/") + function_endpoint_path(namespace, runtime, uid)
    if len(url) > MAX_ENDPOINT_URL_BYTES:
        raise EndpointPathError(
            "status.endpoint.url", f"{len(url)} bytes exceed the limit of {MAX_ENDPOINT_URL_BYTES}"
        )
    return url


def parse_function_endpoint_url(url: str) -> tuple[str, FunctionEndpointRef]:
    """Split a published endpoint URL into its base URL and the addressed function.

    Args:
        url: a ``status.endpoint.url`` value.

    Returns:
        ``(base_url, ref)`` such that ``function_endpoint_url(base_url, *ref)`` == ``url``.

    Raises:
        EndpointPathError: not an absolute http(s) URL ending in an invoke path.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.query or parts.fragment:
        raise EndpointPathError("url", f"{url[:200]!r} is not an absolute http(s) invoke URL")
    index = parts.path.rfind("/v1/namespaces/")
    if index < 0:
        raise EndpointPathError("url", f"{url[:200]!r} has no /v1/namespaces/... invoke path")
    ref = parse_function_endpoint_path(parts.path[index:])
    base = f"{parts.scheme}://{parts.netloc}{parts.path[:index]}"
    return base, ref
