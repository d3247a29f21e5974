"""The hypercorn release series the gateway's patches of hypercorn's internals are written for.

:mod:`gateway.response_writes`, :mod:`gateway.disconnects` and :mod:`gateway.keep_alive`
each replace a few hypercorn internals for speed (issue 8); each installs only when
:func:`patchable` says the installed hypercorn is of :data:`SUPPORTED_SERIES`, and leaves
any other version exactly as it is.
"""

from __future__ import annotations

import importlib.metadata
from typing import Final

__all__ = ["SUPPORTED_SERIES", "patchable"]

#: Version prefix of the hypercorn releases whose internals the patches match.
SUPPORTED_SERIES: Final = "0.17."


def patchable() -> bool:
    """Whether the installed hypercorn is of :data:`SUPPORTED_SERIES`."""
    return importlib.metadata.version("hypercorn").startswith(SUPPORTED_SERIES)
