"""Make the shared runtimed test helpers (one folder up) and this folder's fakes importable."""

from __future__ import annotations

import sys
from pathlib import Path

for folder in (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
