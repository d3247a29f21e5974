"""Import paths for the fuzz suite (its fixtures live in the test modules that use them).

The harnesses reused here live in test folders that are not packages
(``tests/gateway/gwfakes.py``, ``tests/runtimed/dataplane/dp_harness.py``,
``tests/api/krtapi_samples.py``): their folders are appended to ``sys.path`` so this suite
uses them instead of copying them. How properties run and how they are made reproducible:
see :mod:`.fuzzing`.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent
for _folder in (
    _TESTS / "gateway",
    _TESTS / "runtimed" / "dataplane",
    _TESTS / "api",
):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
