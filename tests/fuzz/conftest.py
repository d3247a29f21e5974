"""Fixtures and import paths for the fuzz suite.

The gateway and runtimed data-plane harnesses live in test folders that are not packages
(``tests/gateway/gwfakes.py``, ``tests/runtimed/dataplane/dp_harness.py``,
``tests/api/krtapi_samples.py``); their folders are
appended to ``sys.path`` here so this suite reuses them instead of copying them.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent
for _folder in (
    _TESTS / "gateway",
    _TESTS / "runtimed" / "dataplane",
    _TESTS / "runtimed",
    _TESTS / "api",
):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
