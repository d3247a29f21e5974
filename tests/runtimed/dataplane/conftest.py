"""Make this folder's helpers and the shared runtimed test helpers importable."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for folder in (_HERE, _HERE.parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
