"""The ASGI application: Kubernetes REST paths onto handlers, JSON in, JSON (or Table) out.

Served by :mod:`localkube.http_server` (h11 on trio; see :mod:`localkube.apiserver`), which
sends a sized response in one TLS record: :meth:`ApiApp._respond` gives the head and the
whole body, and a write's body reuses the bytes the store committed. Per request: authenticate
the bearer token (401) and apply ``Impersonate-*`` headers, route the path (404 for
unknown paths or kinds, 405 for a verb the kind or subresource does not serve), authorize
with RBAC (403), read the body (413 over :data:`MAX_BODY_BYTES`; JSON, or the protobuf
bodies of :mod:`localkube.protobuf_bodies`; 400 for bad JSON, 415 for other media types),
call the verb and answer JSON (a ``meta.k8s.io/v1 Table`` when asked) or a ``Status``.
Watches stream chunked lines until they end or the client disconnects. Every failure is
an :class:`~localkube.errors.ApiError` answered as a ``Status``; anything else is logged
and answered 500.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import trio

from localkube import (
    discovery,
    freshness,
    handlers,
    jsonbody,
    openapi,
    protobuf_bodies,
    request_warnings,
    storage,
    subresources,
    tables,
    watching,
)
from localkube.access import Access, name_from_field_selector, request_attributes
from localkube.admission import CRD_KEY
from localkube.auth import reviews
from localkube.auth.types import UserInfo
from localkube.deletion import DeleteOptions, Deleter
from localkube.errors import ApiError
from localkube.request_user import CURRENT_USER
from localkube.resources import ResourceRegistry, ResourceType
from localkube.routing import (
    SUBRESOURCE_VERBS,
    Route,
    not_found_path,
    request_verb,
    resolve,
    wants_table,
)

log = logging.getLogger("localkube.app")

MAX_BODY_BYTES = 3 * 1024 * 1024
"""Largest accepted request body (bytes), as kube-apiserver's 3 MiB limit."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass
class ServerContext:
    """Everything the application serves from.

    Attributes:
        store, registry, handlers, deleter, access: the server's parts.
        subresources: status-free subresources (log, token, scale).
        clock: wall-clock source. server_address: ``host:port`` for ``/api``.
        bookmark_interval: seconds between watch BOOKMARKs.
    """

    store: storage.Store
    registry: ResourceRegistry
    handlers: handlers.Handlers
    deleter: Deleter
    access: Access
    subresources: subresources.Subresources
    clock: Callable[[], datetime]
    server_address: str = ""
    bookmark_interval: float = 60.0


class ApiApp:
    """The ASGI 3 application.

    Args:
        ctx: the server's parts.
    """

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point (``lifespan`` and ``http`` scopes)."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        await self._http(scope, receive, send)

    # plumbing ------------------------------------------------------------------

    async def _respond(
        self,
        send: Send,
        code: int,
        body: Any,
        *,
        content_type: str = "application/json",
        retry_after: int = 0,
    ) -> None:
        if isinstance(body, bytes):
            data = body
        else:  # a write's result is the object just committed: reuse its encoding
            data = self.ctx.store.encoded(body) or storage.encode(body)
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(data)).encode()),
            (b"cache-control", b"no-cache, private"),
        ]
        if retry_after > 0:  # as kube-apiserver for a Status with details.retryAfterSeconds
            headers.append((b"retry-after", str(retry_after).encode()))
        headers.extend(request_warnings.headers())
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        """Read the request body; over the limit, drain it (so the client reads our 413)."""
        chunks: list[bytes] = []
        size = 0
        too_large = False
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_large = int(value) > MAX_BODY_BYTES
                except ValueError:
                    raise ApiError(400, "BadRequest", "invalid Content-Length") from None
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ApiError(400, "BadRequest", "the client disconnected before sending the body")
            chunk = message.get("body", b"")
            size += len(chunk)
            too_large = too_large or size > MAX_BODY_BYTES
            if not too_large:
                chunks.append(chunk)
            if not message.get("more_body", False):
                if too_large:
                    raise _too_large()
                return b"".join(chunks)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"].upper()
        path = scope["path"]
        raw_query = scope.get("query_string", b"")
        query = (
            {
                k: v[-1]
                for k, v in urllib.parse.parse_qs(
                    raw_query.decode(), keep_blank_values=True
                ).items()
            }
            if raw_query
            else {}
        )
        headers = {k.decode().lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        request_warnings.start()
        try:
            user = self.ctx.access.authenticate(headers.get("authorization"), path)
            if any(k.startswith("impersonate-") for k in headers):
                user = self.ctx.access.impersonate(user, scope.get("headers", []))
            await self._dispatch(scope, receive, send, method, path, query, headers, user)
        except ApiError as exc:
            retry_after = (exc.details or {}).get("retryAfterSeconds", 0)
            await self._respond(send, exc.code, exc.status(), retry_after=retry_after)
        except Exception:
            log.exception("internal error serving %s %s", method, path)
            await self._respond(
                send,
                500,
                ApiError(
                    500,
                    "InternalError",
                    "an error on the server has prevented the request from succeeding",
                ).status(),
            )

    # dispatch ------------------------------------------------------------------

    async def _dispatch(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        method: str,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        user: UserInfo,
    ) -> None:
        ctx = self.ctx
        CURRENT_USER.set(user)  # this request's task only; read by admission
        route = resolve(ctx.registry, path)
        if not isinstance(route, Route):
            ctx.access.require(user, request_attributes(method=method, path=path, verb=None))
            if method != "GET":
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            clean = "/" + path.strip("/")
            if clean == "/openapi/v2" and openapi.wants_v2_protobuf(headers.get("accept", "")):
                await self._respond(
                    send, 200, openapi.v2_protobuf(), content_type=openapi.V2_PROTOBUF_MEDIA_TYPE
                )
                return
            if clean in ("/api", "/apis") and discovery.wants_aggregated(headers.get("accept", "")):
                document = discovery.aggregated(ctx.registry, core=clean == "/api")
                await self._respond(
                    send, 200, document, content_type=discovery.AGGREGATED_MEDIA_TYPE
                )
                return
            await self._respond(send, 200, self._non_resource(path, route))
            return
        verb = request_verb(method, route, query)
        rt = route.rt
        allowed = SUBRESOURCE_VERBS[route.subresource] if route.subresource else rt.verbs
        if verb not in allowed:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        ctx.access.require(
            user,
            request_attributes(
                method=method,
                path=path,
                verb=verb,
                group=rt.group,
                resource=rt.plural,
                subresource=route.subresource,
                namespace=route.namespace,
                name=route.name
                or (
                    name_from_field_selector(query.get("fieldSelector", ""))
                    if verb in ("list", "watch")
                    else ""
                ),
            ),
        )
        dry_run = bool(query.get("dryRun"))
        field_validation = query.get("fieldValidation", "")
        if verb == "watch":
            await self._watch(route, query, headers, receive, send)
            return
        if verb in ("get", "list"):
            await self._read(route, verb, query, headers, send)
            return
        raw = await self._read_body(scope, receive)
        if verb == "patch":
            content_type = headers.get("content-type", "")
            result = self._patch(route, content_type, raw, dry_run, field_validation)
            await self._respond(send, 200, result)
            return
        content_type = headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if raw and content_type == protobuf_bodies.MEDIA_TYPE:
            body: Any = protobuf_bodies.decode_body(raw)
        elif raw and content_type not in ("application/json", "", "*/*"):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json",
            )
        else:
            body = _decode(raw) if raw else None
        if verb == "create":
            code, result = self._create(route, body, user, dry_run, field_validation)
        elif verb == "update":
            code, result = self._update(route, body, dry_run, field_validation)
        elif verb == "delete":
            code, result = self._delete(route, query, body)
        else:
            code, result = self._delete_collection(route, query, body)
        await self._respond(send, code, result)

    def _non_resource(self, path: str, target: tuple[str, str] | None) -> Any:
        ctx = self.ctx
        clean = "/" + path.strip("/")
        if clean in ("/healthz", "/livez", "/readyz"):
            return b"ok"
        if clean == "/version":
            return discovery.version()
        if clean == "/api":
            return discovery.core_versions(ctx.server_address)
        if clean == "/apis":
            return discovery.group_list(ctx.registry)
        if clean == "/openapi/v2":
            return openapi.v2_document()
        if clean == "/openapi/v3" or clean.startswith("/openapi/v3/"):
            documents = openapi.all_documents(ctx.registry, self._crd_schemas())
            if clean == "/openapi/v3":
                return openapi.root_document(ctx.registry, documents)
            document = documents.get(clean.removeprefix("/openapi/v3/"))
            if document is not None:
                return document
            raise not_found_path()
        if target is not None:
            found = discovery.resource_list(ctx.registry, *target)
            if found is not None:
                return found
        segments = clean.strip("/").split("/")
        if len(segments) == 2 and segments[0] == "apis":
            group = discovery.group(ctx.registry, segments[1])
            if group is not None:
                return group
        raise not_found_path()

    def _crd_schemas(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        schemas: dict[tuple[str, str, str], dict[str, Any]] = {}
        for crd in self.ctx.store.list(CRD_KEY):
            spec = crd.get("spec") or {}
            for version in spec.get("versions") or []:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if isinstance(schema, dict):
                    key = (
                        str(spec.get("group")),
                        str(version.get("name")),
                        str((spec.get("names") or {}).get("kind")),
                    )
                    schemas[key] = schema
        return schemas

    # verbs ---------------------------------------------------------------------

    def _namespace_of(self, route: Route) -> str:
        return route.namespace if route.rt.namespaced else ""

    async def _read(
        self, route: Route, verb: str, query: dict[str, str], headers: dict[str, str], send: Send
    ) -> None:
        ctx = self.ctx
        rt = route.rt
        if route.subresource and route.subresource != "status":
            answer = await ctx.subresources.get(route, query)
            if isinstance(answer, subresources.Stream):
                await self._stream(send, answer)
            else:
                await self._respond(send, 200, answer.body, content_type=answer.content_type)
            return
        table = wants_table(headers.get("accept", ""))
        include = query.get("includeObject", "Metadata")
        if verb == "get":
            obj = ctx.handlers.get(rt, self._namespace_of(route), route.name)
            if table:
                result: Any = tables.table(
                    rt,
                    [obj],
                    list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                    now=ctx.clock(),
                    include_object=include,
                )
            else:
                result = obj
            await self._respond(send, 200, result)
            return
        options = handlers.parse_list_options(rt, query)
        wanted = handlers.parse_revision(options.resource_version)
        if not options.continue_token and wanted is not None and wanted > ctx.store.revision:
            # as kube-apiserver's watch cache: a future resourceVersion may arrive shortly
            with trio.move_on_after(watching.FUTURE_RESOURCE_VERSION_WAIT):
                await freshness.reach_revision(ctx.store, wanted)
        listing = ctx.handlers.list(
            rt, None if route.all_namespaces else self._namespace_of(route), options
        )
        if table:
            listing = tables.table(
                rt,
                listing["items"],
                list_meta=listing["metadata"],
                now=ctx.clock(),
                include_object=include,
            )
        await self._respond(send, 200, listing)

    async def _stream(self, send: Send, stream: subresources.Stream) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", stream.content_type.encode()),
                    (b"transfer-encoding", b"chunked"),
                ],
            }
        )
        async for chunk in stream.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch(
        self,
        route: Route,
        query: dict[str, str],
        headers: dict[str, str],
        receive: Receive,
        send: Send,
    ) -> None:
        ctx = self.ctx
        options = handlers.parse_list_options(route.rt, query)
        try:
            timeout = float(query.get("timeoutSeconds") or watching.DEFAULT_TIMEOUT)
        except ValueError:
            raise ApiError(
                400, "BadRequest", f'timeoutSeconds: Invalid value: "{query["timeoutSeconds"]}"'
            ) from None
        request = watching.WatchRequest(
            rt=route.rt,
            namespace=None if route.all_namespaces else self._namespace_of(route),
            options=options,
            bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
            send_initial_events=query.get("sendInitialEvents") in ("true", "1"),
            timeout=max(timeout, 0.0),
            table=wants_table(headers.get("accept", "")),
            include_object=query.get("includeObject", "Metadata"),
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"cache-control", b"no-cache, private"),
                    (b"transfer-encoding", b"chunked"),
                ],
            }
        )

        async def emit(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        async with trio.open_nursery() as nursery:

            async def watch_disconnect() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(watch_disconnect)
            await watching.run_watch(
                ctx.store, request, emit, now=ctx.clock, bookmark_interval=ctx.bookmark_interval
            )
            nursery.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _create(
        self, route: Route, body: Any, user: UserInfo, dry_run: bool, field_validation: str
    ) -> tuple[int, Any]:
        ctx = self.ctx
        rt = route.rt
        if route.subresource:
            return ctx.subresources.create(route, body, user)
        if not rt.stored:
            return 201, self._review(rt, route, body, user)
        if route.all_namespaces and rt.namespaced:
            raise not_found_path()
        return 201, ctx.handlers.create(
            rt,
            self._namespace_of(route),
            body,
            dry_run=dry_run,
            field_validation=field_validation,
        )

    def _review(self, rt: ResourceType, route: Route, body: Any, user: UserInfo) -> Any:
        access = self.ctx.access
        kind = rt.plural
        if kind == "selfsubjectaccessreviews":
            return reviews.self_subject_access_review(body, caller=user, authorize=access.authorize)
        if kind == "subjectaccessreviews":
            return reviews.subject_access_review(body, caller=user, authorize=access.authorize)
        if kind == "localsubjectaccessreviews":
            return reviews.local_subject_access_review(
                body, namespace=route.namespace, caller=user, authorize=access.authorize
            )
        if kind == "tokenreviews":
            return reviews.token_review(
                body, caller=user, authorize=access.authorize, verify=access.verify
            )
        if kind == "selfsubjectrulesreviews":
            return reviews.self_subject_rules_review(body, caller=user, rules_for=access.rules_for)
        if kind == "selfsubjectreviews":
            return reviews.self_subject_review(body, caller=user)
        raise not_found_path()

    def _update(
        self, route: Route, body: Any, dry_run: bool, field_validation: str
    ) -> tuple[int, Any]:
        ctx = self.ctx
        if route.subresource == "scale":
            return 200, ctx.subresources.update_scale(route, body)
        if body is None:
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        return 200, ctx.handlers.update(
            route.rt,
            self._namespace_of(route),
            route.name,
            body,
            subresource=route.subresource,
            dry_run=dry_run,
            field_validation=field_validation,
        )

    def _patch(
        self, route: Route, content_type: str, raw: bytes, dry_run: bool, field_validation: str
    ) -> Any:
        ctx = self.ctx
        if route.subresource == "scale":
            return ctx.subresources.patch_scale(route, content_type, raw)
        return ctx.handlers.patch(
            route.rt,
            self._namespace_of(route),
            route.name,
            content_type,
            raw,
            subresource=route.subresource,
            dry_run=dry_run,
            field_validation=field_validation,
        )

    def _delete(self, route: Route, query: dict[str, str], body: Any) -> tuple[int, Any]:
        rt = route.rt
        options = DeleteOptions.parse(query, body)
        obj, deleted = self.ctx.deleter.delete(rt, self._namespace_of(route), route.name, options)
        if deleted:
            return 200, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": route.name,
                    "group": rt.group,
                    "kind": rt.plural,
                    "uid": obj["metadata"].get("uid", ""),
                },
            }
        return 200, handlers.for_version(rt, obj)

    def _delete_collection(self, route: Route, query: dict[str, str], body: Any) -> tuple[int, Any]:
        ctx = self.ctx
        rt = route.rt
        options = DeleteOptions.parse(query, body)
        list_options = handlers.parse_list_options(rt, query)
        namespace = None if route.all_namespaces else self._namespace_of(route)
        items = ctx.handlers.list(rt, namespace, list_options)["items"]
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            try:
                final, _ = ctx.deleter.delete(rt, meta.get("namespace", ""), meta["name"], options)
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(handlers.for_version(rt, final))
        return 200, {
            "kind": rt.effective_list_kind(),
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(ctx.store.revision)},
            "items": deleted,
        }


def _decode(raw: bytes) -> Any:
    try:
        return jsonbody.loads(raw)
    except ValueError as exc:
        raise ApiError(
            400, "BadRequest", f"the body of the request could not be decoded as JSON: {exc}"
        ) from None


def _too_large() -> ApiError:
    return ApiError(
        413,
        "RequestEntityTooLarge",
        f"the request body is larger than the limit of {MAX_BODY_BYTES} bytes",
    )
