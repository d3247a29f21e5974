"""The Kubernetes client every component uses: kr8s for config, auth and TLS; raw REST on top.

:func:`connect` builds a ``kr8s.asyncio.Api`` (kubeconfig, or the in-cluster ServiceAccount
when there is none) and wraps it in :class:`Kube`, whose methods are thin typed verbs over
plain dicts: ``get``, ``list``, ``create``, ``replace``, ``replace_status``, ``patch``,
``delete``, ``watch``.

Why raw REST and not kr8s's object layer: the object layer wraps every object in a class per
call, re-reads objects after writes and its ``watch`` restarts a 410 Gone watch from the same
(expired) resourceVersion, drops BOOKMARKs and never re-lists. Controllers need exact
resourceVersion handling (conditional PUTs, 409 on a stale read, bookmarks, 410 -> re-list),
so this module speaks the REST protocol itself and keeps kr8s for what it does well:
kubeconfig contexts, exec/token/cert auth, ServiceAccount files and the TLS context.

Why the requests do not go through kr8s's httpx session (``Api.call_api``): every component
pays this client's CPU per request on a 2-core budget (issues 6 and 8), and
``bench/kube_client.py`` measured kr8s + httpx + httpcore at 2.2-2.7x the CPU of the same
request over :mod:`krt.kube.http11` (prebuilt absolute targets and headers, one send per
request, h11 parsing; 0.33-0.37 ms instead of 0.87-0.95 ms for a status PUT on loopback
TLS), and less again since its responses of the usual shape are read without h11 over a
lean TLS stream (:mod:`krt.tls_stream`; see :mod:`krt.kube.http11` for the figures). The
pool is built from kr8s's own settings (server URL, ``ssl.SSLContext``, TLS server name),
credentials are read from kr8s (``auth.token``) and reloaded through kr8s
(``auth.reauthenticate()``) on a 401. kr8s's session stays available (:attr:`Kube.api`) for
callers that use kr8s directly. kr8s's authentication is
:class:`~krt.kube.kr8s_auth.ScrubbingKubeAuth`: inline kubeconfig credentials stay in
memory, and no credential file kr8s writes outlives the load that wrote it.

Errors: every non-2xx answer raises the :mod:`krt.kube.errors` class for its Status;
transport failures raise :class:`~krt.kube.errors.ConnectionFailed`. No method takes a
timeout: callers bound calls with ``trio.fail_after`` / ``trio.move_on_after``.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import os
import ssl
import urllib.request
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode, urlsplit

import httpx
import yaml
from kr8s import ServerError
from kr8s.asyncio import Api

from krt.kube.errors import ConnectionFailed, KubeError, error_from_status
from krt.kube.http11 import Http11Pool, Origin, TransportError, check_header, parse_origin
from krt.kube.http11_errors import describe_failure
from krt.kube.interface import KubeClient, Obj, PatchType
from krt.kube.kr8s_auth import scrubbing_auth_for, uses_client_certificate
from krt.kube.kubeconfig_files import kubeconfig_problem, loader_problem, missing_kubeconfig_problem
from krt.kube.resources import ResourceRef
from krt.kube.tls_material import TlsMaterialError

__all__ = [
    "DEFAULT_SERVICEACCOUNT_DIR",
    "ConfigError",
    "Kube",
    "Obj",
    "PatchType",
    "connect",
]

log = logging.getLogger(__name__)

PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}

PROPAGATION_POLICIES = frozenset({"Foreground", "Background", "Orphan"})

DEFAULT_SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: Page size for :meth:`Kube.list` (objects per request; Kubernetes' own default is unbounded).
DEFAULT_PAGE_SIZE = 500

#: Seconds an idle API server connection is kept for reuse. httpx's 5 s default closed the
#: connections a component opened in one burst before the next (issue 6: a task burst after
#: a quiet pool paid a TLS handshake per status writer); client-go keeps them 90 s. Kept
#: below localkube's 75 s server-side idle timeout, so the client closes first and a write
#: never races the server closing its connection.
IDLE_CONNECTION_SECONDS = 60.0

WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})

#: ``User-Agent`` of every request.
USER_AGENT = "kruntimes-krt"


class ConfigError(KubeError):
    """No usable client configuration (no kubeconfig, not in a cluster, unknown context)."""


class _Api(Api):
    """kr8s's ``Api`` whose httpx session keeps every idle connection it may open.

    httpcore closes an idle connection whenever the pool holds more than
    ``max_keepalive_connections`` (httpx default 20) connections *in total*, long-lived watches
    included (encode/httpcore#1000). A component with a handful of watches then opens, and
    TLS-handshakes, a new connection for nearly every request of a burst, and the handshakes
    land on the API server. kr8s builds its ``httpx.AsyncClient`` itself (also again after a
    re-authentication) without a ``limits`` argument, so the pool is adjusted after each
    build: keep-alive up to ``max_connections`` (httpx default 100).

    Its ``auth`` is a :class:`~krt.kube.kr8s_auth.ScrubbingKubeAuth`, built with the same
    arguments as kr8s's own ``KubeAuth``: kr8s's credential temporary files are deleted as
    soon as it has written them, and every TLS context is built from memory.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.auth = scrubbing_auth_for(kwargs)

    async def _create_session(self) -> None:
        await super()._create_session()
        keep_all_connections_alive(self._session)


def keep_all_connections_alive(session: httpx.AsyncClient | None) -> bool:
    """Raise the session's keep-alive limit to its connection limit (see :class:`_Api`).

    Args:
        session: kr8s's httpx client (``None`` before the first request).

    Returns:
        True when the pool was found and adjusted; False when httpx's private layout changed
        (the client still works, with httpx's default keep-alive limit).
    """
    pool = getattr(getattr(session, "_transport", None), "_pool", None)
    maximum = getattr(pool, "_max_connections", None)
    if pool is None or not hasattr(pool, "_max_keepalive_connections") or maximum is None:
        return False
    pool._max_keepalive_connections = maximum
    return True


# One encoder and decoder for every request: json.dumps builds a new encoder per call when
# given separators, and json.loads of bytes detects the encoding in Python first.
_encode = json.JSONEncoder(separators=(",", ":")).encode
_decode_text = json.JSONDecoder().decode


def _dumps(obj: object) -> bytes:
    return _encode(obj).encode()


def _loads(content: bytes) -> Any:
    """Decode UTF-8 JSON (ValueError, including UnicodeDecodeError, when it is not)."""
    return _decode_text(content.decode())


def _decode(response: httpx.Response) -> object:
    content = response.content
    if not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return response.text


def _decode_body(content: bytes) -> object:
    """Decode a response body: JSON, or the text of a non-JSON answer, or None if empty."""
    if not content:
        return None
    try:
        return _loads(content)
    except ValueError:
        return content.decode("utf-8", "replace")


def _shown(line: bytes) -> str:
    """The first 200 bytes of a watch line, as text for an error message."""
    return line[:200].decode("utf-8", "replace")


def _validation(field_validation: str) -> dict[str, str] | None:
    """The ``fieldValidation`` query parameter, or ``None`` for the server's default."""
    if not field_validation:
        return None
    if field_validation not in ("Strict", "Warn", "Ignore"):
        raise ValueError(
            f"field_validation must be Strict, Warn or Ignore, got {field_validation!r}"
        )
    return {"fieldValidation": field_validation}


def _target(path: str, params: Mapping[str, str] | None) -> str:
    return f"{path}?{urlencode(params, quote_via=quote)}" if params else path


class _Transport:
    """The HTTP/1.1 pool (:mod:`krt.kube.http11`) a :class:`Kube` and its token views share.

    Built on first use from kr8s's configuration (server URL, TLS context, TLS server name)
    and built again after :meth:`aclose`, as kr8s re-creates a closed session.
    """

    def __init__(self, api: Any) -> None:
        self.api = api
        self._pool: Http11Pool | None = None

    async def pool(self) -> Http11Pool:
        pool = self._pool
        if pool is None or pool.closed:
            fresh = await _open_pool(self.api)
            pool = self._pool
            if pool is None or pool.closed:  # no concurrent caller built one meanwhile
                pool = self._pool = fresh
        return pool

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()


async def _open_pool(api: Any) -> Http11Pool:
    """A pool to kr8s's server with kr8s's settings (CA, client certificate, SNI, proxy).

    The proxy is the kubeconfig's ``proxy-url``, else ``HTTPS_PROXY``/``ALL_PROXY`` unless
    ``NO_PROXY`` exempts the server (as kr8s's httpx session and client-go do).

    Raises:
        ConfigError: an unusable server or proxy address (only an ``http://`` proxy in front
            of an ``https`` server is supported, tunnelled with ``CONNECT``).
    """
    auth = api.auth
    try:
        origin = parse_origin(str(auth.server))
        proxy = proxy_authorization = None
        proxy_url = getattr(auth, "proxy", None) or _environment_proxy(origin)
        if proxy_url:
            proxy = parse_origin(str(proxy_url))
            proxy_authorization = _basic_authorization(str(proxy_url))
        context: ssl.SSLContext | None = None
        if origin.tls:
            try:
                verify = await auth.ssl_context()
            except TlsMaterialError as exc:
                raise ConfigError(f"the kubeconfig's TLS settings: {exc}") from exc
            # kr8s answers True for "no CA/certificate configured": httpx's default context
            # (certifi's trust store), which kr8s's httpx session used.
            context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context()
        return Http11Pool(
            origin,
            ssl_context=context,
            server_hostname=auth.tls_server_name,
            proxy=proxy,
            proxy_authorization=proxy_authorization,
            keepalive_expiry=IDLE_CONNECTION_SECONDS,
        )
    except ValueError as exc:
        raise ConfigError(f"API server or proxy address: {exc}") from exc


def _environment_proxy(origin: Origin) -> str | None:
    """``HTTPS_PROXY`` (or ``ALL_PROXY``) for an https server not exempted by ``NO_PROXY``.

    Like Go's ``httpproxy`` (client-go, kubectl), a loopback server (``localhost``,
    127.0.0.0/8, ``::1``) is never proxied: a machine-wide proxy setting must not send
    requests for a local cluster to the proxy.
    """
    proxies = urllib.request.getproxies_environment()
    url = proxies.get("https") or proxies.get("all")
    if not url or not origin.tls or _is_loopback(origin.host):
        return None
    if _no_proxy(origin.host, proxies.get("no", "")):
        return None
    return url


def _is_loopback(host: str) -> bool:
    """``localhost`` (or a name under it) or a loopback address."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _no_proxy(host: str, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` exempts ``host``: ``*``, a domain suffix, an address or a CIDR."""
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = entry.lstrip(".").rsplit(":", 1)[0] if ":" in entry else entry.lstrip(".")
        if host.lower() == domain or host.lower().endswith("." + domain):
            return True
    return False


def _basic_authorization(url: str) -> str | None:
    """``Basic ...`` from the ``user:password@`` of a proxy URL, or None."""
    parts = urlsplit(url)
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(pair.encode()).decode("ascii")


def _metadata(obj: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise ValueError(f"{what}: object has no metadata map")
    return metadata


class Kube:
    """A connected Kubernetes client (see the module docstring).

    Build it with :func:`connect`. Close it with :meth:`aclose` (or ``async with``).

    Args:
        api: a ready (awaited) ``kr8s.asyncio.Api``.
        namespace: the default namespace of the configuration (kubeconfig context
            namespace, the ServiceAccount's namespace, or ``default``). Informational: every
            call names its namespace explicitly.
    """

    def __init__(self, api: Any, *, namespace: str) -> None:
        self._api = api
        self.namespace = namespace
        self._transport = _Transport(api)
        self._fixed_token: str | None = None
        self._owns_session = True
        self._headers_token: str | None = None
        self._headers: list[tuple[str, str]] = []
        self._json_headers: list[tuple[str, str]] = []
        #: Number of API requests sent (for tests and metrics).
        self.requests = 0

    def _request_headers(self) -> list[tuple[str, str]]:
        """Headers for a body-less request (rebuilt only when the token changes)."""
        token = self._fixed_token if self._fixed_token is not None else self._api.auth.token
        if token != self._headers_token or not self._headers:
            headers = [("Accept", "application/json"), ("User-Agent", USER_AGENT)]
            if token:
                headers.append(check_header("Authorization", f"Bearer {token}"))
            self._headers = headers
            self._json_headers = [*headers, ("Content-Type", "application/json")]
            self._headers_token = token
        return self._headers

    @property
    def api(self) -> Any:
        """The underlying ``kr8s.asyncio.Api`` (for callers that need kr8s objects)."""
        return self._api

    def with_token(self, token: str) -> Kube:
        """Return a view of this client that authenticates every request with ``token``.

        The view shares the HTTP session (connection pool, TLS) and only replaces the
        ``Authorization`` header, so it is cheap enough to make per request. Used where the
        API must see the *caller's* identity, e.g. a SelfSubjectAccessReview submitted with
        an invoker's bearer token (seed 000, "the receiving runtimed uses that token to
        submit a SelfSubjectAccessReview"). A 401 with such a token is final (no credential
        reload). Closing the view does not close the shared session.

        Args:
            token: a bearer token (printable ASCII, no whitespace).

        Returns:
            A :class:`Kube` sharing this one's session.

        Raises:
            ValueError: an empty token or one with whitespace or control characters.
            ConfigError: this client authenticates with a TLS client certificate, which the
                API server would use instead of the token.
        """
        if not token or any(not 0x21 <= ord(ch) <= 0x7E for ch in token):
            raise ValueError("token must be non-empty printable ASCII without whitespace")
        if uses_client_certificate(self._api.auth):
            raise ConfigError(
                "this client authenticates with a TLS client certificate; the API server "
                "would ignore a bearer token on the same connection"
            )
        view = Kube(self._api, namespace=self.namespace)
        view._transport = self._transport
        view._fixed_token = token
        view._owns_session = False
        return view

    async def aclose(self) -> None:
        """Close the HTTP connections (idempotent; a no-op on :meth:`with_token` views).

        A later request opens new connections.
        """
        if not self._owns_session:
            return
        await self._transport.aclose()
        session = getattr(self._api, "_session", None)
        if session is not None and not session.is_closed:
            await session.aclose()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- transport -----------------------------------------------------------------------

    async def request(
        self,
        method: str,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str | None = None,
    ) -> Any:
        """Send one REST request and return the decoded JSON answer.

        Args:
            method: HTTP method.
            ref: the resource type.
            namespace: the namespace part of the address (see :meth:`ResourceRef.path`).
            name: the object name, or None for the collection.
            subresource: e.g. ``status``, or None.
            params: query parameters.
            body: a JSON-serialisable request body, or None.
            content_type: overrides ``application/json`` (patch types).

        Returns:
            The decoded JSON body (a dict for every Kubernetes answer).

        Raises:
            ApiError: (a subclass of) for any non-2xx answer.
            ConnectionFailed: the server could not be reached.
            ValueError: an invalid address.
        """
        target = _target(ref.path(namespace, name, subresource), params)
        data = _dumps(body) if body is not None else None
        return await self._send(method, target, data, content_type)

    async def _send(
        self, method: str, target: str, data: bytes | None, content_type: str | None = None
    ) -> Any:
        """Send ``data`` to ``target`` (path and query); reload credentials once on a 401."""
        reauthenticated = False
        while True:
            headers = self._request_headers()
            if content_type is not None:
                headers = [*headers, check_header("Content-Type", content_type)]
            elif data is not None:
                headers = self._json_headers
            self.requests += 1
            try:
                pool = await self._transport.pool()
                status, content = await pool.request(method, target, headers, data)
            except TransportError as exc:
                raise ConnectionFailed(f"{method} {target}: {exc}") from exc
            if status == 401 and not reauthenticated and self._fixed_token is None:
                reauthenticated = True
                await self._reauthenticate()
                continue
            payload = _decode_body(content)
            if status >= 400:
                raise error_from_status(status, payload)
            return payload

    async def _reauthenticate(self) -> None:
        """Reload credentials (a rotated ServiceAccount token, a refreshed exec token)."""
        log.info("401 from the API server: reloading credentials")
        await self._api.auth.reauthenticate()

    # -- verbs ---------------------------------------------------------------------------

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> Obj:
        """GET one object.

        Args:
            ref: resource type.
            name: object name.
            namespace: required for namespaced types, None for cluster-scoped ones.

        Raises:
            NotFound: no such object. ApiError, ConnectionFailed: see :meth:`request`.
            ValueError: a namespace is missing or not allowed.
        """
        result: Obj = await self.request("GET", ref, namespace=namespace, name=name)
        return result

    async def list(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> tuple[list[Obj], str]:
        """LIST a collection, following ``continue`` tokens across pages.

        Args:
            ref: resource type.
            namespace: one namespace, or None for all namespaces (or a cluster-scoped type).
            label_selector: e.g. ``kruntimes.io/runtime=py``.
            field_selector: e.g. ``status.phase=Running``.
            page_size: objects per request (``limit``), at least 1.

        Returns:
            ``(items, resourceVersion)``: every object (``apiVersion`` and ``kind`` filled
            in, as watch events carry them) and the list's resourceVersion to watch from.

        Raises:
            Gone: the continue token expired mid-list (re-list from scratch).
            ApiError, ConnectionFailed: see :meth:`request`.
            ValueError: ``page_size`` < 1.
        """
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        params: dict[str, str] = {"limit": str(page_size)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        items: list[Obj] = []
        while True:
            answer = await self.request("GET", ref, namespace=namespace, params=params)
            for item in answer.get("items") or []:
                item.setdefault("apiVersion", ref.api_version)
                item.setdefault("kind", ref.kind)
                items.append(item)
            meta = answer.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
            params["continue"] = str(token)

    async def create(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, field_validation: str = ""
    ) -> Obj:
        """POST a new object; its namespace comes from ``obj.metadata.namespace``.

        ``apiVersion`` and ``kind`` are filled in from ``ref`` when missing.
        ``field_validation`` (``Strict``, ``Warn``, ``Ignore``; empty: the server's default,
        ``Warn``) is the ``fieldValidation`` parameter: with ``Strict`` a field the kind does
        not declare is refused (400 BadRequest) instead of dropped.

        Returns:
            The object as stored (uid, resourceVersion, defaults).

        Raises:
            AlreadyExists: the name is taken. Invalid: validation failed (see ``causes``).
            BadRequest: an undeclared field under ``Strict``.
            ApiError, ConnectionFailed: see :meth:`request`.
            ValueError: no metadata, or no namespace for a namespaced type.
        """
        metadata = _metadata(obj, f"create {ref}")
        namespace = metadata.get("namespace") if ref.namespaced else None
        if ref.namespaced and not namespace:
            raise ValueError(f"create {ref}: metadata.namespace is required")
        body = {"apiVersion": ref.api_version, "kind": ref.kind, **obj}
        result: Obj = await self.request(
            "POST", ref, namespace=namespace, body=body, params=_validation(field_validation)
        )
        return result

    def _address(
        self, ref: ResourceRef, obj: Mapping[str, Any], what: str
    ) -> tuple[str | None, str]:
        metadata = _metadata(obj, what)
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: metadata.name is required")
        if not metadata.get("resourceVersion"):
            raise ValueError(
                f"{what}: metadata.resourceVersion is required (writes are conditional; "
                "re-read the object instead of overwriting blindly)"
            )
        namespace = metadata.get("namespace") if ref.namespaced else None
        if ref.namespaced and not namespace:
            raise ValueError(f"{what}: metadata.namespace is required")
        return namespace, name

    async def replace(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, field_validation: str = ""
    ) -> Obj:
        """PUT a whole object, conditional on its ``metadata.resourceVersion``.

        ``field_validation``: as for :meth:`create`.

        Returns:
            The stored object (new resourceVersion).

        Raises:
            Conflict: the object changed since ``resourceVersion`` was read.
            NotFound: it was deleted. Invalid, ApiError, ConnectionFailed: see :meth:`request`.
            ValueError: name, namespace or resourceVersion missing.
        """
        namespace, name = self._address(ref, obj, f"replace {ref}")
        body = {"apiVersion": ref.api_version, "kind": ref.kind, **obj}
        result: Obj = await self.request(
            "PUT",
            ref,
            namespace=namespace,
            name=name,
            body=body,
            params=_validation(field_validation),
        )
        return result

    async def replace_status(self, ref: ResourceRef, obj: Mapping[str, Any]) -> Obj:
        """PUT ``obj`` to the ``status`` subresource, conditional on its resourceVersion.

        Only ``status`` is taken from ``obj`` by the server; spec and metadata changes are
        ignored there.

        Returns:
            The stored object (new resourceVersion).

        Raises:
            Conflict: stale resourceVersion (re-read from the cache and retry later).
            NotFound, Invalid, ApiError, ConnectionFailed: see :meth:`request`.
            ValueError: name, namespace or resourceVersion missing.
        """
        namespace, name = self._address(ref, obj, f"replace_status {ref}")
        body = {"apiVersion": ref.api_version, "kind": ref.kind, **obj}
        result: Obj = await self.request(
            "PUT", ref, namespace=namespace, name=name, subresource="status", body=body
        )
        return result

    async def patch(
        self,
        ref: ResourceRef,
        name: str,
        namespace: str | None,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        type: PatchType = "merge",  # noqa: A002 - the name the interface agreed on
        subresource: str | None = None,
    ) -> Obj:
        """PATCH an object.

        Args:
            ref: the resource type.
            name: the object name.
            namespace: its namespace (None for cluster-scoped types).
            patch: a merge/strategic patch (a dict) or a JSON patch (a list of operations).
            type: ``merge`` (RFC 7386), ``json`` (RFC 6902) or ``strategic`` (built-in
                types only).
            subresource: e.g. ``status``.

        Returns:
            The patched object.

        Raises:
            Conflict: a ``metadata.resourceVersion`` in the patch, or a JSON patch ``test``,
                did not hold. NotFound, Invalid, ApiError, ConnectionFailed: see :meth:`request`.
            ValueError: unknown patch type, or a JSON patch that is not a list (or a
                merge/strategic patch that is not a map).
        """
        content_type = PATCH_CONTENT_TYPES.get(type)
        if content_type is None:
            raise ValueError(
                f"patch type must be one of {sorted(PATCH_CONTENT_TYPES)}, got {type!r}"
            )
        if type == "json" and not isinstance(patch, Sequence):
            raise ValueError("a json patch must be a list of operations")
        if type != "json" and not isinstance(patch, Mapping):
            raise ValueError(f"a {type} patch must be a map")
        result: Obj = await self.request(
            "PATCH",
            ref,
            namespace=namespace,
            name=name,
            subresource=subresource,
            body=patch,
            content_type=content_type,
        )
        return result

    async def delete(
        self,
        ref: ResourceRef,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Mapping[str, str] | None = None,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj:
        """DELETE an object.

        Args:
            ref: the resource type.
            name: the object name.
            namespace: its namespace (None for cluster-scoped types).
            preconditions: ``{"uid": ..., "resourceVersion": ...}`` (either or both): delete
                only that incarnation / that version.
            propagation_policy: ``Foreground``, ``Background`` or ``Orphan``.
            grace_period_seconds: seconds; 0 deletes at once.

        Returns:
            The object as it stands (finalizers pending, ``deletionTimestamp`` set) or the
            server's success Status.

        Raises:
            NotFound: already gone. Conflict: a precondition failed.
            ApiError, ConnectionFailed: see :meth:`request`.
            ValueError: unknown precondition key or propagation policy.
        """
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if preconditions:
            unknown = set(preconditions) - {"uid", "resourceVersion"}
            if unknown:
                raise ValueError(f"preconditions: unknown keys {sorted(unknown)}")
            options["preconditions"] = dict(preconditions)
        if propagation_policy is not None:
            if propagation_policy not in PROPAGATION_POLICIES:
                raise ValueError(
                    f"propagation_policy must be one of {sorted(PROPAGATION_POLICIES)}, "
                    f"got {propagation_policy!r}"
                )
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            if grace_period_seconds < 0:
                raise ValueError(f"grace_period_seconds must be >= 0, got {grace_period_seconds}")
            options["gracePeriodSeconds"] = grace_period_seconds
        result: Obj = await self.request(
            "DELETE", ref, namespace=namespace, name=name, body=options
        )
        return result

    async def watch(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        resource_version: str = "",
        *,
        label_selector: str = "",
        field_selector: str = "",
        timeout_seconds: int | None = None,
        bookmarks: bool = True,
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        """WATCH a collection from ``resource_version``.

        An async generator: wrap it in ``contextlib.aclosing`` when you may stop early.

        Args:
            ref: resource type.
            namespace: one namespace or None for all.
            resource_version: start after this version (from a list or a bookmark); empty
                means "from now, with synthetic ADDED events for existing objects".
            label_selector: as for :meth:`list`.
            field_selector: as for :meth:`list`.
            timeout_seconds: ask the server to end the stream after this many seconds.
            bookmarks: request BOOKMARK events (``allowWatchBookmarks``).

        Yields:
            ``(type, object)`` with type ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``
            (a bookmark's object carries only ``metadata.resourceVersion``). Returns when the
            server ends the stream (timeout).

        Raises:
            Gone: ``resource_version`` is too old (410, as an answer or an ERROR event):
                re-list.
            ApiError: other error answers or ERROR events.
            ConnectionFailed: the stream broke or carried a line that is not a JSON event.
        """
        path = ref.path(namespace)
        params: dict[str, str] = {"watch": "1"}
        if resource_version:
            params["resourceVersion"] = resource_version
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(int(timeout_seconds))
        target = _target(path, params)
        headers = self._request_headers()
        self.requests += 1
        try:
            pool = await self._transport.pool()
            async with pool.stream("GET", target, headers) as response:
                if response.status >= 400:
                    payload = _decode_body(await response.read())
                    if response.status == 401 and self._fixed_token is None:
                        await self._reauthenticate()
                    raise error_from_status(response.status, payload)
                async with aclosing(response.iter_lines()) as lines:
                    async for line in lines:
                        if not line or line.isspace():  # (strip() would copy every line)
                            continue
                        try:
                            event = _loads(line)
                        except ValueError as exc:
                            raise ConnectionFailed(
                                f"watch {ref}: undecodable line {_shown(line)!r}"
                            ) from exc
                        if type(event) is not dict:
                            raise ConnectionFailed(f"watch {ref}: not an event: {_shown(line)!r}")
                        kind = event.get("type")
                        obj = event.get("object")
                        if kind == "ERROR":
                            code = obj.get("code", 500) if isinstance(obj, Mapping) else 500
                            raise error_from_status(int(code), obj)
                        if kind not in WATCH_EVENT_TYPES or type(obj) is not dict:
                            log.warning("watch %s: ignoring malformed event %r", ref, _shown(line))
                            continue
                        yield kind, obj
        except TransportError as exc:
            raise ConnectionFailed(f"watch {ref}: {exc}") from exc


def _in_cluster_namespace(serviceaccount_dir: Path) -> str | None:
    try:
        return (serviceaccount_dir / "namespace").read_text().strip() or None
    except OSError:
        return None


def _client_settings(
    kubeconfig: Path | None, serviceaccount_dir: Path
) -> tuple[dict[str, Any], str | None]:
    """Choose kubeconfig or in-cluster settings (a few stat calls, at start-up only)."""
    if kubeconfig is not None:
        if not kubeconfig.exists():
            raise ConfigError(f"kubeconfig {str(kubeconfig)!r} does not exist")
        return {"kubeconfig": str(kubeconfig)}, None
    env = os.environ.get("KUBECONFIG", "")
    candidates = [Path(p) for p in env.split(os.pathsep) if p] or [Path.home() / ".kube" / "config"]
    present = [str(p) for p in candidates if p.exists()]
    if present:
        return {"kubeconfig": os.pathsep.join(present)}, None
    if not (serviceaccount_dir / "token").exists() or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise ConfigError(
            f"{missing_kubeconfig_problem(env, candidates)}, and not in a cluster "
            f"({serviceaccount_dir}/token or KUBERNETES_SERVICE_HOST missing)"
        )
    # A kubeconfig path that does not exist keeps kr8s from reading ~/.kube/config.
    settings = {"serviceaccount": str(serviceaccount_dir), "kubeconfig": "/nonexistent/kubeconfig"}
    return settings, _in_cluster_namespace(serviceaccount_dir)


async def connect(
    *,
    kubeconfig: Path | None = None,
    context: str | None = None,
    namespace: str | None = None,
    serviceaccount_dir: Path = DEFAULT_SERVICEACCOUNT_DIR,
) -> Kube:
    """Connect to the API server and return a :class:`Kube` (close it with ``aclose``).

    Configuration, first that applies:

    1. ``kubeconfig`` (a path), with ``context`` or the file's current context;
    2. ``$KUBECONFIG`` or ``~/.kube/config`` when present;
    3. in-cluster: the ServiceAccount files under ``serviceaccount_dir`` (``token``,
       ``ca.crt``, ``namespace``) and ``$KUBERNETES_SERVICE_HOST``/``_PORT``.

    A rotated ServiceAccount token is reloaded on the first 401.

    Args:
        kubeconfig: path to a kubeconfig file.
        context: kubeconfig context name.
        namespace: default namespace (overrides the context's / ServiceAccount's).
        serviceaccount_dir: where the in-cluster credentials are mounted.

    Returns:
        A connected client; the server's ``/version`` has answered.

    Raises:
        ConfigError: no kubeconfig found and not running in a cluster, or a kubeconfig
            that cannot be used (not YAML, not a mapping, no current context, unknown
            context, cluster or user; the message names the file).
        ConnectionFailed: the server did not answer ``/version``.
        ApiError: ``/version`` answered with an error (e.g. :class:`Unauthorized`).
    """
    kwargs, sa_namespace = _client_settings(kubeconfig, serviceaccount_dir)
    files = "" if "serviceaccount" in kwargs else str(kwargs["kubeconfig"])
    if files:
        problem = kubeconfig_problem([Path(f) for f in files.split(os.pathsep)], context=context)
        if problem is not None:
            raise ConfigError(problem)
    # Api(bypass_factory=True) builds a private client: kr8s.asyncio.api() caches one Api
    # per (thread, asyncio loop); under trio the loop id is always 0, so separate trio.run
    # calls in one thread (tests, CLI commands) would share an httpx session bound to a
    # finished event loop.
    api = _Api(bypass_factory=True, context=context, namespace=namespace, **kwargs)
    kube = Kube(api, namespace="default")
    try:
        try:
            try:
                await api.auth  # kubeconfig or ServiceAccount files, exec plugins
            except (yaml.YAMLError, LookupError, TypeError, AttributeError) as exc:
                where = files or "the in-cluster ServiceAccount configuration"
                raise ConfigError(f"{where}: cannot load it: {loader_problem(exc)}") from exc
            # /version through the client's own pool (it stays open for the next request)
            await kube._send("GET", "/version", None)
        except BaseException:
            await kube.aclose()  # no half-open connection left behind
            raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    except (httpx.TransportError, OSError) as exc:
        raise ConnectionFailed(f"cannot reach the API server: {describe_failure(exc)}") from exc
    except ServerError as exc:
        # kr8s raises its ServerError (with the httpx response) when an exec plugin or
        # token request fails while loading credentials.
        response = getattr(exc, "response", None)
        if isinstance(response, httpx.Response):
            raise error_from_status(response.status_code, _decode(response)) from exc
        raise ConnectionFailed(f"the API server failed: {exc}") from exc
    kube.namespace = namespace or sa_namespace or api.auth.namespace or "default"
    kube.requests = 0  # count the caller's requests only
    return kube


if TYPE_CHECKING:

    def _kube_is_a_kube_client(kube: Kube) -> KubeClient:
        return kube  # mypy proves Kube satisfies the KubeClient protocol
