"""The client interface the rest of :mod:`krt.kube` (and its users) depend on.

:class:`KubeClient` is the structural type of :class:`krt.kube.client.Kube`'s verbs.
Informers, status writers, leader election, heartbeats and the Event recorder accept any
``KubeClient``, so a controller's unit tests can pass an in-memory fake of *our* wrapper
(STYLE.md: "mock only our own wrappers") while integration tests pass a real ``Kube``
connected to localkube.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias

from krt.kube.resources import ResourceRef

__all__ = ["KubeClient", "Obj", "PatchType"]

Obj: TypeAlias = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

PatchType: TypeAlias = Literal["merge", "json", "strategic"]


class KubeClient(Protocol):
    """The verbs of :class:`krt.kube.client.Kube`; see there for semantics and errors."""

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> Obj:
        """GET one object."""
        ...

    async def list(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[Obj], str]:
        """LIST a collection: ``(items, resourceVersion)``."""
        ...

    async def create(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, field_validation: str = ""
    ) -> Obj:
        """POST a new object (``field_validation``: the ``fieldValidation`` parameter)."""
        ...

    async def replace(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, field_validation: str = ""
    ) -> Obj:
        """PUT an object, conditional on its resourceVersion."""
        ...

    async def replace_status(self, ref: ResourceRef, obj: Mapping[str, Any]) -> Obj:
        """PUT the status subresource, conditional on the resourceVersion."""
        ...

    async def patch(
        self,
        ref: ResourceRef,
        name: str,
        namespace: str | None,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        type: PatchType = "merge",  # noqa: A002 - the agreed interface name
        subresource: str | None = None,
    ) -> Obj:
        """PATCH an object."""
        ...

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
        """DELETE an object."""
        ...

    def watch(
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
        """WATCH a collection: an async generator of ``(type, object)``."""
        ...
