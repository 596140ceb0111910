"""Every benchmark measures the checkout it lives in.

Imported first by each benchmark: puts this checkout's root ahead of any installed ``oam_actors``,
in this process and, through ``PYTHONPATH``, in the servers, shards and Ray workers it starts.
Without it ``python3 benchmarks/X.py`` in a second checkout (a worktree, a clone beside an
editable install) imports whichever copy is installed: a script's own folder, not the working
directory, is first on its path, so an A/B of two trees would compare one tree with itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if sys.path[:1] != [str(ROOT)]:
    sys.path.insert(0, str(ROOT))
_inherited = os.environ.get("PYTHONPATH", "")
if _inherited.split(os.pathsep)[0] != str(ROOT):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), _inherited]))
