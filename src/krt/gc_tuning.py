"""Keep the garbage collector's full collections off a daemon's hot path.

CPython's full (generation 2) collection walks every container object the process holds.
After start-up that is mostly objects that live for the whole process: modules, classes,
functions, protobuf descriptors, compiled schemas. In a 200-Run task burst (issue 6) one
full collection cost 35-90 ms in each runtimed, Runtime Server and control plane process,
a stall for every Run in flight there, and about 2 ms of CPU per Run summed over the
cluster. :func:`gc.freeze` moves what exists at that moment into a permanent generation
that collections skip, so a later full collection walks only what was allocated since
(0.1-9 ms in the same burst). This is CPython's documented use of ``gc.freeze``; cycles
created later are still collected as before.

The youngest generation's threshold is raised from CPython's 700 to
:data:`YOUNG_THRESHOLD` allocations: a server allocates and frees many short-lived
containers per request (parsed JSON, protobuf messages, trio tasks), and with the default
most young collections found nothing to free (in the same burst the remaining
collections' time halved again). Memory held by uncollected cycles stays bounded by that
count of objects.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["YOUNG_THRESHOLD", "freeze_startup_heap"]

#: Allocations (net of deallocations) of tracked objects between young collections.
YOUNG_THRESHOLD: Final = 20_000


def freeze_startup_heap() -> int:
    """Collect garbage once, freeze every object that survived, raise the young threshold.

    Call it once a daemon has imported its modules and built its long-lived state, just
    before it starts serving (calling it again later freezes what was added since). Objects
    frozen are never freed, so it is for long-running processes, not libraries or
    short-lived commands.

    Returns:
        The number of objects now in the permanent generation.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    return gc.get_freeze_count()
