"""Who this runtimed is: the Runtime Pod it runs in (read from its environment at start-up)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """The Runtime Pod this runtimed serves.

    Attributes:
        name: Pod name (``POD_NAME``).
        namespace: Pod namespace, also the namespace of its Runs (``POD_NAMESPACE``).
        uid: Pod UID (``POD_UID``): the fence of every assignment (``status.assignedPodUID``).
        ip: Pod IP (``POD_IP``), may be empty.
        runtime: the Runtime's name (``RUNTIME_NAME``).
    """

    name: str
    namespace: str
    uid: str
    ip: str = ""
    runtime: str = ""

    def __post_init__(self) -> None:
        for field_name in ("name", "namespace", "uid"):
            if not getattr(self, field_name):
                raise ValueError(f"Pod identity: {field_name} must not be empty")
