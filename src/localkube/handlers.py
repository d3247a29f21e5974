"""The verbs of the Kubernetes REST API over the store: create, get, list, update, patch.

HTTP-free: the ASGI layer (:mod:`localkube.app`) decodes the request, calls these methods
and encodes what they return. Each method checks every rule before writing, so a rejected
request leaves no partial state. Deletion lives in :mod:`localkube.deletion`; the rules on
object metadata in :mod:`localkube.objects`.

Spec: issue 3, "Verbs", "Object metadata", "Status subresource", "list and watch", "CRDs".
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from localkube import conversion, jsonbody, objects, patching, storage
from localkube.admission import Admission
from localkube.deletion import CRD_KEY, DeleteOptions, Deleter, crd_terminating_error
from localkube.errors import ApiError
from localkube.field_validation import Directive, parse_directive
from localkube.resources import ResourceRegistry, ResourceType
from localkube.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)

Clock = Callable[[], datetime]
"""Wall-clock source (injectable for tests)."""

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


def utc_now() -> datetime:
    """The default :data:`Clock`."""
    return datetime.now(UTC)


def not_found(rt: ResourceType, name: str) -> ApiError:
    """The 404 for a missing object, worded as kube-apiserver does."""
    return ApiError(
        404,
        "NotFound",
        f'{rt.group_resource} "{name}" not found',
        details={"name": name, "group": rt.group, "kind": rt.plural},
    )


def conflict(rt: ResourceType, name: str, reason: str = "") -> ApiError:
    """The 409 for a stale resourceVersion (or ``reason``), worded as kube-apiserver does."""
    reason = reason or (
        "the object has been modified; please apply your changes to the latest version and "
        "try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {reason}',
        details={"name": name, "group": rt.group, "kind": rt.plural},
    )


def gone(message: str) -> ApiError:
    """The 410 Gone for a compacted resourceVersion."""
    return ApiError(410, "Expired", message)


def parse_revision(value: str | None, *, field: str = "resourceVersion") -> int | None:
    """Parse a resourceVersion parameter; ``""``/None gives None.

    Raises:
        ApiError: 400 when it is not a non-negative integer.
    """
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise ApiError(
            400, "BadRequest", f'{field}: Invalid value: "{value}": must be a non-negative integer'
        )
    return number


@dataclass(frozen=True)
class ListOptions:
    """Parsed list/watch query parameters.

    Attributes:
        labels, fields: parsed selectors. limit: page size (0 = all).
        continue_token: from a previous page. resource_version: ``resourceVersion``.
        resource_version_match: ``NotOlderThan``, ``Exact`` or "".
    """

    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""

    @property
    def selects_all(self) -> bool:
        """Whether neither selector has a requirement (every object matches)."""
        return not self.labels.requirements and not self.fields.requirements

    def matches(self, obj: dict[str, Any]) -> bool:
        """Return whether ``obj`` passes both selectors."""
        return self.labels.matches(obj.get("metadata", {}).get("labels")) and self.fields.matches(
            obj
        )


def parse_list_options(rt: ResourceType, query: dict[str, str]) -> ListOptions:
    """Build :class:`ListOptions` from query parameters.

    Raises:
        ApiError: 400 for a bad selector, limit or resourceVersionMatch.
    """
    try:
        labels = parse_label_selector(query.get("labelSelector"))
    except SelectorError as exc:
        raise ApiError(400, "BadRequest", f"unable to parse requirement: {exc}") from exc
    try:
        fields = parse_field_selector(query.get("fieldSelector"), rt.supported_fields)
    except SelectorError as exc:
        # kube-apiserver words these without the label selector's prefix
        raise ApiError(400, "BadRequest", str(exc)) from exc
    try:
        limit = int(query.get("limit") or 0)
    except ValueError:
        raise ApiError(400, "BadRequest", f'limit: Invalid value: "{query["limit"]}"') from None
    match = query.get("resourceVersionMatch", "")
    if match not in ("", "NotOlderThan", "Exact"):
        raise ApiError(
            400,
            "BadRequest",
            f'resourceVersionMatch: Unsupported value: "{match}": supported values: "Exact", "NotOlderThan"',
        )
    rv = query.get("resourceVersion", "")
    if match and not rv:
        raise ApiError(
            400,
            "BadRequest",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )
    parse_revision(rv)
    return ListOptions(
        labels=labels,
        fields=fields,
        limit=max(limit, 0),
        continue_token=query.get("continue", ""),
        resource_version=rv,
        resource_version_match=match,
    )


def _encode_continue(revision: int, last: tuple[str, str]) -> str:
    raw = json.dumps({"rv": revision, "start": [last[0], last[1]]}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (binascii.Error, ValueError, KeyError, TypeError, IndexError):
        raise ApiError(400, "BadRequest", "continue key is not valid: malformed token") from None


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """The 504 kube-apiserver answers for a resourceVersion newer than its store.

    Worded as apiserver's ``storage.NewTooLargeResourceVersionError`` (``errors.NewTimeoutError``
    prefixes ``Timeout: ``); the response also carries ``Retry-After: 1``.

    Args:
        requested: the client's resourceVersion. current: the store's revision.
    """
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def for_version(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Return a stored object as served at ``rt`` (see :func:`localkube.conversion.to_view`)."""
    return conversion.to_view(rt, obj)


class Handlers:
    """Create/get/list/update/patch for every stored kind.

    Args:
        store: the object store. registry: the served types.
        admission: kind-specific validation and side effects (CRDs, namespaces).
        deleter: deletion rules (used when an update removes the last finalizer).
        clock: wall-clock source for timestamps.
    """

    def __init__(
        self,
        store: storage.Store,
        registry: ResourceRegistry,
        admission: Admission,
        deleter: Deleter,
        *,
        clock: Clock = utc_now,
    ) -> None:
        self.store = store
        self.registry = registry
        self.admission = admission
        self.deleter = deleter
        self.clock = clock

    # helpers -----------------------------------------------------------------

    def _key(self, rt: ResourceType, namespace: str, name: str) -> storage.ObjectKey:
        return (rt.storage_key, namespace if rt.namespaced else "", name)

    def require(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """Return the stored object or raise the 404 :class:`ApiError`."""
        obj = self.store.get(*self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt, name)
        return obj

    # verbs -------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """GET one object (read-only result).

        Raises:
            ApiError: 404 NotFound.
        """
        return for_version(rt, self.require(rt, namespace, name))

    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        field_validation: str = "",
    ) -> dict[str, Any]:
        """POST a new object.

        Args:
            rt: the type. namespace: URL namespace (``""`` for cluster-scoped).
            body: the decoded JSON body; consumed (it becomes part of the stored object).
            dry_run: validate only (``dryRun=All``).
            field_validation: the ``fieldValidation`` parameter: ``Strict`` rejects
                undeclared fields, ``Warn`` (or empty) warns of them, ``Ignore``
                (:meth:`localkube.admission.Admission.check_fields`).

        Returns:
            The stored object.

        Raises:
            ApiError: 400 (body/URL mismatch), 404/403 (namespace missing or terminating),
                405 (custom object of a terminating CRD), 409 AlreadyExists, 422 Invalid.
        """
        directive = parse_directive(field_validation, options_kind="CreateOptions")
        meta = body.get("metadata") if isinstance(body, dict) else None
        named = isinstance(meta, dict) and bool(meta.get("name"))
        obj = objects.check_body_identity(rt, body, namespace=namespace, name=None)
        self.admission.check_fields(rt, obj, directive)
        if rt.crd_name:
            crd = self.store.get(CRD_KEY, "", rt.crd_name)
            if crd is not None and objects.is_deleting(crd):
                raise crd_terminating_error()
        if rt.namespaced:
            self.admission.check_namespace_open(
                namespace,
                resource=rt.plural,
                group=rt.group,
                name=str(obj["metadata"].get("name") or ""),
            )
        objects.prepare_create(rt, obj, now=self.clock())
        obj = self.admission.admit(
            rt,
            obj,
            None,
            strict=directive is Directive.STRICT,
            warn=directive is Directive.WARN,
        )
        key = self._key(rt, namespace, obj["metadata"]["name"])
        if self.store.get(*key) is not None:
            if not named:
                # generateName collided: retry with a fresh suffix, as kube-apiserver does.
                for _ in range(8):
                    obj["metadata"]["name"] = objects.generated_name(
                        obj["metadata"]["generateName"]
                    )
                    key = self._key(rt, namespace, obj["metadata"]["name"])
                    if self.store.get(*key) is None:
                        break
            if self.store.get(*key) is not None:
                name = obj["metadata"]["name"]
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{rt.group_resource} "{name}" already exists',
                    details={"name": name, "group": rt.group, "kind": rt.plural},
                )
        obj = conversion.to_storage(rt, obj)
        if dry_run:
            obj["metadata"]["resourceVersion"] = ""
            return for_version(rt, obj)
        self.admission.before_write(rt, obj, None)
        stored = self.store.create(key, obj)
        self.admission.after_write(rt, stored, None)
        return for_version(rt, stored)

    def list(self, rt: ResourceType, namespace: str | None, options: ListOptions) -> dict[str, Any]:
        """LIST objects (``namespace`` None: all namespaces).

        Implements label/field selectors, ``limit``/``continue`` paging (every page is the
        state at the first page's resourceVersion, kept in the token; 410 once that
        revision has left the event history), and
        ``resourceVersion``/``resourceVersionMatch`` (``Exact`` rolls back through the
        event history; older than the history gives 410).

        Raises:
            ApiError: 400 bad token, 410 Expired, 504 Timeout for a future resourceVersion.
        """
        revision = self.store.revision
        rv = parse_revision(options.resource_version)
        start: tuple[str, str] | None = None
        if options.continue_token:
            # every page is served at the first page's revision, as etcd-backed lists are
            revision, start = _decode_continue(options.continue_token)
            try:
                items = self.store.list_at(rt.storage_key, namespace, revision)
            except storage.Gone:
                raise gone(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter."
                ) from None
            except storage.Conflict:
                raise ApiError(
                    400, "BadRequest", "continue key is not valid: malformed token"
                ) from None
        elif rv is not None and rv > 0 and options.resource_version_match == "Exact":
            try:
                items = self.store.list_at(rt.storage_key, namespace, rv)
            except storage.Gone as exc:
                raise gone(
                    f"The resourceVersion for the provided list is too old. ({exc})"
                ) from None
            except storage.Conflict:
                raise too_large_resource_version(rv, revision) from None
            revision = rv
        else:
            if rv is not None and rv > revision:
                raise too_large_resource_version(rv, revision)
            items = self.store.list(rt.storage_key, namespace)
        selected: list[dict[str, Any]] = []
        next_token = ""
        remaining = 0
        for obj in items:
            meta = obj["metadata"]
            position = (meta.get("namespace", ""), meta["name"])
            if start is not None and position <= start:
                continue
            view = for_version(rt, obj)
            if not options.matches(view):
                continue
            if options.limit and len(selected) >= options.limit:
                remaining += 1
                continue
            selected.append(view)
        if remaining:
            last = selected[-1]["metadata"]
            next_token = _encode_continue(revision, (last.get("namespace", ""), last["name"]))
        list_meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if next_token:
            list_meta["continue"] = next_token
            list_meta["remainingItemCount"] = remaining
        return {
            "kind": rt.effective_list_kind(),
            "apiVersion": rt.api_version,
            "metadata": list_meta,
            "items": selected,
        }

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "",
    ) -> dict[str, Any]:
        """PUT an object (or its ``status`` subresource).

        A body with ``metadata.resourceVersion`` is a conditional update (409 if stale);
        without one it is unconditional. A body's ``metadata.uid`` is a precondition (409 if
        the object was replaced by another of the same name). An update that removes the
        last finalizer of an object being deleted deletes it.

        Raises:
            ApiError: 400, 404, 409 Conflict, 422 Invalid.
        """
        directive = parse_directive(field_validation, options_kind="UpdateOptions")
        obj = objects.check_body_identity(rt, body, namespace=namespace, name=name)
        self.admission.check_fields(rt, obj, directive)
        old = self.require(rt, namespace, name)
        body_uid = obj["metadata"].get("uid")
        if body_uid and body_uid != old["metadata"].get("uid"):
            raise conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {body_uid}, UID in object meta: "
                f"{old['metadata'].get('uid', '')}",
            )
        expected = parse_revision(
            obj["metadata"].get("resourceVersion"), field="metadata.resourceVersion"
        )
        return self._write(
            rt,
            old,
            obj,
            expected,
            subresource=subresource,
            dry_run=dry_run,
            directive=directive,
        )

    def _write(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        obj: dict[str, Any],
        expected: int | None,
        *,
        subresource: str,
        dry_run: bool,
        directive: Directive = Directive.IGNORE,
    ) -> dict[str, Any]:
        name = old["metadata"]["name"]
        if expected is not None and str(expected) != old["metadata"]["resourceVersion"]:
            raise conflict(rt, name)
        new = objects.prepare_update(rt, old, obj, subresource=subresource)
        if subresource != "status":
            new = self.admission.admit(
                rt,
                new,
                old,
                strict=directive is Directive.STRICT,
                warn=directive is Directive.WARN,
            )
        else:
            new = self.admission.admit_status(rt, new, old)
        key = self._key(rt, old["metadata"].get("namespace", ""), name)
        new = conversion.to_storage(rt, new)
        if subresource != "status":
            objects.settle_generation(rt, old, new)
        if dry_run:
            return for_version(rt, new)
        if self.deleter.finalized(rt, old, new):
            return for_version(rt, self.deleter.remove(key, rt, new, expected_revision=None))
        self.admission.before_write(rt, new, old)
        try:
            stored = self.store.update(key, new, expected_revision=expected)
        except storage.Conflict:
            raise conflict(rt, name) from None
        self.admission.after_write(rt, stored, old)
        return for_version(rt, stored)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: bytes,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "",
    ) -> dict[str, Any]:
        """PATCH an object (or its ``status`` subresource).

        Args:
            content_type: the request's media type, choosing the patch kind
                (:data:`PATCH_TYPES`); strategic merge only for built-in kinds.
            body: the raw patch bytes.

        Raises:
            ApiError: 400 bad JSON, 404, 409 (a ``metadata.resourceVersion`` in the patch
                that is stale), 415 unsupported patch type, 422 invalid result or failed
                JSON patch ``test``.
        """
        directive = parse_directive(field_validation, options_kind="PatchOptions")
        kind = PATCH_TYPES.get(content_type.split(";")[0].strip().lower())
        if kind is None or kind == "apply" or (kind == "strategic" and not rt.strategic_merge):
            supported = [
                t
                for t, k in PATCH_TYPES.items()
                if k in ("json", "merge") or (k == "strategic" and rt.strategic_merge)
            ]
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: {', '.join(supported)}",
            )
        try:
            patch_doc = jsonbody.loads(body)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"error decoding patch: {exc}") from None
        old = self.require(rt, namespace, name)
        current = for_version(rt, copy.deepcopy(old))
        try:
            if kind == "json":
                patched = patching.json_patch(current, patch_doc)
            elif kind == "merge":
                patched = patching.merge_patch(current, patch_doc)
            else:
                patched = patching.strategic_merge_patch(current, patch_doc)
        except patching.PatchError as exc:
            raise ApiError(
                422,
                "Invalid",
                f"the server rejected our request due to an error in our request: {exc}",
            ) from None
        obj = objects.check_body_identity(rt, patched, namespace=namespace, name=name)
        self.admission.check_fields(rt, obj, directive, patch=(kind, patch_doc))
        expected = None
        patched_rv = obj["metadata"].get("resourceVersion")
        if patched_rv != old["metadata"]["resourceVersion"]:
            expected = parse_revision(patched_rv, field="metadata.resourceVersion")
        return self._write(
            rt,
            old,
            obj,
            expected,
            subresource=subresource,
            dry_run=dry_run,
            directive=directive,
        )

    def delete_options(self, query: dict[str, str], body: Any) -> DeleteOptions:
        """Parse DeleteOptions from the query and an optional JSON body.

        Raises:
            ApiError: 400 for an unknown propagationPolicy or a bad gracePeriodSeconds.
        """
        return DeleteOptions.parse(query, body)
