"""``oam-actors simulate``: a crowd of conversations driven through a real bridge, with a report."""

from .config import SimConfig
from .driver import SimRun, run_simulation
from .report import build_report, write_report

__all__ = ["SimConfig", "SimRun", "build_report", "run_simulation", "write_report"]
