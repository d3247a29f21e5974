"""Subresources other than ``status``: ``pods/log``, ``serviceaccounts/token``, ``*/scale``.

* ``pods/{name}/log`` reads the files the node writes (:mod:`localkube.node.logs`) under the
  cluster state directory; without one (or before the node ran the container) it answers
  400 like a kubelet whose container is not running.
* ``serviceaccounts/{name}/token`` (TokenRequest) delegates to
  :func:`localkube.auth.token_request.token_request` with the stored ServiceAccount.
* ``pods/{name}/binding`` sets ``spec.nodeName`` once (the scheduler's step), bypassing
  the Pod spec's immutability as kube-apiserver does.
* ``deployments|replicasets/{name}/scale`` reads and writes ``spec.replicas`` through an
  ``autoscaling/v1 Scale``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from localkube import jsonbody, patching, storage
from localkube.auth.token_request import token_request
from localkube.auth.tokens import TokenAuthority
from localkube.auth.types import UserInfo
from localkube.errors import ApiError, FieldError, invalid
from localkube.handlers import Handlers
from localkube.tables import json_path

if TYPE_CHECKING:
    from localkube.routing import Route


@dataclass(frozen=True)
class Body:
    """A complete subresource answer."""

    body: bytes
    content_type: str = "application/json"


@dataclass(frozen=True)
class Stream:
    """A streamed subresource answer (``kubectl logs -f``)."""

    chunks: AsyncIterator[bytes]
    content_type: str = "text/plain"


class Subresources:
    """Serves log, token and scale.

    Args:
        handlers: the REST verbs (object lookups, updates).
        token_authority: mints ServiceAccount tokens.
        state_dir: the cluster state directory the node writes logs under (None: no logs).
        wall_time: unix seconds now.
    """

    def __init__(
        self,
        handlers: Handlers,
        token_authority: TokenAuthority,
        *,
        state_dir: Path | None,
        wall_time: Callable[[], float] = time.time,
    ) -> None:
        self.handlers = handlers
        self.token_authority = token_authority
        self.state_dir = state_dir
        self.wall_time = wall_time

    async def get(self, route: Route, query: dict[str, str]) -> Body | Stream:
        """Answer a GET on a subresource.

        Raises:
            ApiError: 404 missing object, 400 no log, 405 for non-readable subresources.
        """
        if route.subresource == "log":
            return await self._log(route, query)
        if route.subresource == "scale":
            return Body(json.dumps(self._scale(route)).encode())
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    # log ---------------------------------------------------------------------

    async def _log(self, route: Route, query: dict[str, str]) -> Body | Stream:
        pod = self.handlers.require(route.rt, route.namespace, route.name)
        containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        container = query.get("container") or ""
        if not container:
            if len(containers) != 1:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {route.name}, choose one of: [{' '.join(containers)}]",
                )
            container = containers[0]
        elif container not in containers:
            raise ApiError(
                400, "BadRequest", f"container {container} is not valid for pod {route.name}"
            )
        waiting = ApiError(
            400,
            "BadRequest",
            f'container "{container}" in pod "{route.name}" is waiting to start: ContainerCreating',
        )
        if self.state_dir is None or not (pod.get("spec") or {}).get("nodeName"):
            raise waiting
        try:
            from localkube.node import logs
            from localkube.node.layout import PodPaths
        except ImportError:
            raise waiting from None
        log_dir = PodPaths.for_pod(
            self.state_dir, route.namespace, route.name, pod["metadata"]["uid"]
        ).log_dir
        tail = _int_param(query, "tailLines")
        since = _int_param(query, "sinceSeconds")
        limit = _int_param(query, "limitBytes")
        timestamps = query.get("timestamps") in ("true", "1")
        previous = query.get("previous") in ("true", "1")
        if query.get("follow") in ("true", "1") and not previous:
            try:
                logs.log_file(log_dir, container)
                chunks = logs.follow_log(
                    log_dir, container, tail_lines=tail, since_seconds=since, timestamps=timestamps
                )
                return Stream(chunks)
            except logs.LogNotFoundError:
                raise waiting from None
        try:
            data = await trio.to_thread.run_sync(
                lambda: logs.read_log(
                    log_dir,
                    container,
                    tail_lines=tail,
                    since_seconds=since,
                    timestamps=timestamps,
                    previous=previous,
                    limit_bytes=limit,
                )
            )
        except logs.LogNotFoundError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        except FileNotFoundError:
            raise waiting from None
        return Body(data, "text/plain")

    # token -------------------------------------------------------------------

    def create(self, route: Route, body: Any, user: UserInfo) -> tuple[int, Any]:
        """Answer a POST on a subresource (``serviceaccounts/token``, see
        :func:`localkube.auth.token_request.token_request`).

        Raises:
            ApiError: 404 missing ServiceAccount or bound object, 400/422 invalid spec,
                409 bound uid mismatch, 405 for other subresources.
        """
        if route.subresource == "binding":
            return 201, self._bind(route, body)
        if route.subresource != "token":
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        sa = self.handlers.require(route.rt, route.namespace, route.name)
        store = self.handlers.store
        keys = {"Pod": "/pods", "Secret": "/secrets"}

        def get_object(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
            key = keys.get(kind)
            return store.get(key, namespace, name) if key else None

        response = token_request(
            body if body is not None else {},
            service_account=sa,
            authority=self.token_authority,
            now=self.wall_time(),
            get_object=get_object,
        )
        return 201, response

    # binding -----------------------------------------------------------------

    def _bind(self, route: Route, body: Any) -> dict[str, Any]:
        """Bind a Pod to a node (``pods/{name}/binding``): set ``spec.nodeName`` once.

        Raises:
            ApiError: 400 without ``target.name``, 404 missing Pod, 409 when the Pod is
                already bound, being deleted, or the ``metadata.uid`` precondition fails.
        """
        binding = body if isinstance(body, dict) else {}
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise invalid(
                "Binding",
                "",
                route.name,
                [FieldError("target.name", "FieldValueRequired", "Required value")],
            )
        pod = self.handlers.require(route.rt, route.namespace, route.name)
        meta = pod["metadata"]
        uid = (binding.get("metadata") or {}).get("uid")
        conflict = f'Operation cannot be fulfilled on pods/binding "{route.name}": '
        if uid and uid != meta.get("uid"):
            raise ApiError(
                409, "Conflict", conflict + "the UID in the binding does not match the pod"
            )
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise ApiError(
                409, "Conflict", conflict + f'pod {route.name} is already assigned to node "{node}"'
            )
        if meta.get("deletionTimestamp"):
            raise ApiError(
                409,
                "Conflict",
                conflict + f"pod {route.name} is being deleted, cannot be assigned to a host",
            )
        bound = copy.deepcopy(pod)
        bound.setdefault("spec", {})["nodeName"] = target
        key = (route.rt.storage_key, route.namespace, route.name)
        try:
            self.handlers.store.update(key, bound, expected_revision=int(meta["resourceVersion"]))
        except storage.Conflict:  # pragma: no cover - no await since the read
            raise ApiError(409, "Conflict", conflict + "the object has been modified") from None
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    # scale -------------------------------------------------------------------

    def _scale(self, route: Route) -> dict[str, Any]:
        obj = self.handlers.require(route.rt, route.namespace, route.name)
        meta = obj["metadata"]
        paths = route.rt.scale_paths
        if paths is None:  # built-in kinds
            matched = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            selector = ",".join(f"{k}={v}" for k, v in sorted(matched.items()))
            spec_replicas = (obj.get("spec") or {}).get("replicas", 1)
            status_replicas = (obj.get("status") or {}).get("replicas", 0)
        else:
            raw_selector = json_path(obj, paths.label_selector) if paths.label_selector else ""
            selector = raw_selector if isinstance(raw_selector, str) else ""
            spec_replicas = json_path(obj, paths.spec_replicas)
            status_replicas = json_path(obj, paths.status_replicas)
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": _replicas(spec_replicas)},
            "status": {"replicas": _replicas(status_replicas), "selector": selector},
        }

    def update_scale(self, route: Route, body: Any) -> dict[str, Any]:
        """PUT a Scale: set ``spec.replicas`` (conditional on its resourceVersion if given).

        Raises:
            ApiError: 400 bad body, 404, 409, 422 negative replicas.
        """
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        replicas = (body.get("spec") or {}).get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise invalid(
                "Scale",
                "autoscaling",
                route.name,
                [
                    FieldError(
                        "spec.replicas",
                        "FieldValueInvalid",
                        f"Invalid value: {replicas!r}: must be greater than or equal to 0",
                    )
                ],
            )
        obj = copy.deepcopy(self.handlers.require(route.rt, route.namespace, route.name))
        paths = route.rt.scale_paths
        _set_path(obj, paths.spec_replicas if paths else ".spec.replicas", replicas)
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv:
            obj["metadata"]["resourceVersion"] = rv
        else:
            obj["metadata"].pop("resourceVersion", None)
        self.handlers.update(route.rt, route.namespace, route.name, obj)
        return self._scale(route)

    def patch_scale(self, route: Route, content_type: str, raw: bytes) -> dict[str, Any]:
        """PATCH a Scale (merge, JSON or strategic patch of the Scale object).

        Raises:
            ApiError: 400 bad patch, 404, 415, 422.
        """
        try:
            doc = jsonbody.loads(raw)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"error decoding patch: {exc}") from None
        current = self._scale(route)
        kind = content_type.split(";")[0].strip()
        try:
            if kind == "application/json-patch+json":
                patched = patching.json_patch(current, doc)
            elif kind == "application/merge-patch+json":
                patched = patching.merge_patch(current, doc)
            elif kind == "application/strategic-merge-patch+json":
                patched = patching.strategic_merge_patch(current, doc)
            else:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
                )
        except patching.PatchError as exc:
            raise ApiError(422, "Invalid", str(exc)) from None
        return self.update_scale(route, patched)


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set the value at a simple JSON path, creating the maps on the way."""
    *parents, last = path.lstrip(".").split(".")
    target = obj
    for part in parents:
        child = target.get(part)
        if not isinstance(child, dict):
            child = target[part] = {}
        target = child
    target[last] = value


def _replicas(value: Any) -> int:
    """A replica count for the Scale object (0 when absent or not an integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _int_param(query: dict[str, str], name: str) -> int | None:
    value = query.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value or "")
    except ValueError:
        raise ApiError(
            400, "BadRequest", f'{name}: Invalid value: "{value}": must be an integer'
        ) from None
