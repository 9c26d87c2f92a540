"""Parameter sweeps and SLO rate searches over simulator configurations.

`grid` turns flags or a TOML file into points, `hashing` names each point, `store` keeps finished rows on disk
as they finish, `executors` runs points here, in local processes or on Dask, `run` ties them together, and
`slo` finds the highest request rate that meets a latency target.
"""

from sim.sweep.grid import Grid, grid_from_flags, load_grid_toml
from sim.sweep.hashing import point_id
from sim.sweep.run import SweepReport, run_slo, run_sweep
from sim.sweep.slo import SLO_METRICS, SearchSettings, SloTarget, search_rate
from sim.sweep.store import ResultStore, load_results

__all__ = [
    "Grid", "grid_from_flags", "load_grid_toml", "point_id", "SweepReport", "run_sweep", "run_slo",
    "SLO_METRICS", "SearchSettings", "SloTarget", "search_rate", "ResultStore", "load_results",
]
