"""kvsim's simulator. The Python API: ``run_simulation(SimConfig(...), workload) -> SimResult``."""

from sim.kernel.config import SimConfig
from sim.kernel.runner import SimResult, run_simulation

__all__ = ["SimConfig", "SimResult", "run_simulation"]
