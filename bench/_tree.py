"""Makes a bench measure the ``queuelake`` of the tree it sits in.

Imported first by every bench script. Without it, ``python <other tree>/bench/drain.py`` imports
whatever ``queuelake`` the environment has installed (an editable install points at one checkout), so
an A/B run of two worktrees silently measures the same code twice. Putting this tree's ``lib/`` at the
front of ``sys.path`` makes the code measured the code beside the script.
"""

from __future__ import annotations

import sys
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib"

if str(LIB) not in sys.path:
    sys.path.insert(0, str(LIB))
