"""Where names become data: spec strings, preset names and trace paths are resolved here, once.

The value objects (`workloads.lengths`, `workloads.arrivals`) hold data, never names; the readers only read;
`workloads.generate.generate` takes objects. This module sits above them all: it parses the command line's
spec strings (``empirical:trace=azure-conv``, ``trace:rate=2,path=FILE``), loads the preset or trace a spec
names, and offers the string-accepting `generate` and `load_trace` that ``workloads`` exports.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from workloads import arrivals as arrival_kinds
from workloads import lengths as length_kinds
from workloads import readers
from workloads.arrivals import ArrivalProcess, TraceTimes, retime
from workloads.errors import SKIP_HINT, TraceError, TraceWarning, check_seed, whole_number
from workloads.generate import generate as generate_from
from workloads.lengths import Empirical, LengthDistribution
from workloads.presets import PRESETS, TIMELESS_PRESETS, load_preset
from workloads.specs import build_from_spec
from workloads.workload import Workload


def load_named(name: str, **read) -> Workload:
    """A preset by name, else a trace file by path (for ``empirical:trace=...`` and ``trace:path=...``; ``read``:
    `readers.load_trace`'s options). Such a file is read whole: ``--skip-bad-rows`` applies to the command's own
    trace, not to one a spec names, so its errors say to fix the row rather than hint at a flag that would not
    reach it."""
    if name in PRESETS:
        return load_preset(name)
    try:
        return readers.load_trace(name, **read)
    except TraceError as exc:
        raise TraceError(str(exc).replace(f" {SKIP_HINT}", " (a file a spec names is read whole: fix or "
                                          "remove that row)")) from exc


def _empirical(trace: str | None = None, max_total: int | None = None) -> Empirical:
    if trace is None:
        raise ValueError("empirical lengths need trace=FILE (or a workload)")
    return Empirical(load_named(trace, check_seconds=False), trace, max_total)  # its lengths only


def _trace_times(rate: float | None = None, path: str | None = None) -> TraceTimes:
    """A file's own timestamps: one without any (a length-only format) reads as all at 0, which `TraceTimes`
    refuses, where the reader's stand-in Poisson times would have passed for the trace's. So does the one preset
    whose file has none (``sharegpt-etalon``: its arrivals are drawn)."""
    if path in TIMELESS_PRESETS:
        raise TraceError(f"trace arrivals: preset {path} has no timestamps of its own (its arrivals are drawn "
                         "poisson); give another arrival process")
    return TraceTimes(rate, load_named(path, missing_times=None, check_seconds=False) if path is not None else None)


def parse_lengths(spec: str | LengthDistribution) -> LengthDistribution:
    """A length distribution from its spec string (`workloads.lengths`), or the distribution itself."""
    if isinstance(spec, str):
        kinds = {**length_kinds.KINDS, "empirical": _empirical}
        return build_from_spec(spec, "lengths", kinds, length_kinds.TYPES)  # type: ignore[return-value]
    return _of_kind(spec, tuple(length_kinds.KINDS.values()), "lengths", "fixed:prompt=100,output=50")


def parse_arrivals(spec: str | ArrivalProcess) -> ArrivalProcess:
    """An arrival process from its spec string (`workloads.arrivals`), or the process itself."""
    if isinstance(spec, str):
        kinds = {**arrival_kinds.KINDS, "trace": _trace_times}
        return build_from_spec(spec, "arrivals", kinds, arrival_kinds.TYPES)  # type: ignore[return-value]
    return _of_kind(spec, tuple(arrival_kinds.KINDS.values()), "arrivals", "poisson:rate=2")


def _of_kind(spec: object, kinds: tuple[type, ...], what: str, example: str):
    """``spec`` itself when it is one of the ``kinds`` objects, else one `TraceError` saying what was expected
    (a None or a dict failed later, inside the generator, as an AttributeError)."""
    if isinstance(spec, kinds):
        return spec
    raise TraceError(f"{what}: expected a spec string such as {example!r}, or one of "
                     f"{', '.join(k.__name__ for k in kinds)}, got {type(spec).__name__}")


def generate(lengths: str | LengthDistribution, arrivals: str | ArrivalProcess, num_requests: int,
             seed: int = 0, **options) -> Workload:
    """`workloads.generate.generate` with its specs given as strings (or objects); same options."""
    return generate_from(parse_lengths(lengths), parse_arrivals(arrivals), num_requests, seed, **options)


def load_trace(path: str | Path, *, arrivals: str | ArrivalProcess | None = None, seed: int = 0,
               num_requests: int | None = None, **read) -> Workload:
    """`workloads.readers.load_trace` (``format``, ``columns``, ``skip_bad_rows`` pass through), cut to its first
    ``num_requests`` rows when given (an error if it has fewer: never silently fewer than asked), then, when
    ``arrivals`` (a spec string or a process) is given, the trace's timestamps replaced by that process's,
    seeded by ``seed`` (the source says so when the file had timestamps of its own). The cut comes first, as a preset's does, so ``trace:rate=R`` scales the rows that run to R
    requests a second (scaled first, 100 rows of a trace whose head is burstier than its whole ran at another
    rate than R)."""
    if not isinstance(path, (str, Path)):  # a frame or a workload: pathlib's TypeError did not say what to do
        raise TypeError(f"load_trace: path must be a file path (str or pathlib.Path), got {type(path).__name__} "
                        "(a frame: workloads.workload_from_frame(df); a workload needs no loading)")
    seed = check_seed(str(path), seed)
    if num_requests is not None:
        num_requests = whole_number(str(path), "num_requests", num_requests, 1)
    workload = readers.load_trace(path, seed=seed, **read) if arrivals is None else \
        readers.load_trace(path, seed=seed, missing_times=None, check_seconds=False, **read)
    if num_requests is not None:
        if num_requests > len(workload):
            raise TraceError(f"{path}: --num-requests {num_requests} asks for more requests than the trace has "
                             f"({len(workload)})")
        workload = workload.head(num_requests)
    if arrivals is None:
        return workload
    process = parse_arrivals(arrivals)
    times = workload.arrival_time_s
    own = len(times) > 1 and float(times.max()) > float(times.min())
    try:
        timed = retime(workload, process, seed, str(arrivals))
    except TraceError as exc:  # (the arrival process knows the workload, not the file it came from)
        raise TraceError(f"{path}: --arrivals {arrivals}: {exc}") from None
    if workload.closed_loop is not None:  # the file's closed loop (its own arrivals) gives way: say so
        loop = workload.closed_loop
        warnings.warn(f"{path}: a closed loop (closed:users={loop.users},think_s={loop.think_time_s:g}); --arrivals "
                      f"{arrivals} replaces it with those arrivals", TraceWarning, stacklevel=2)
    if own and not isinstance(process, TraceTimes):  # --rate on a trace file is easily read as trace:rate=R
        timed.source += " replacing the file's own timestamps (--arrivals trace:rate=R keeps their pattern)"
    return timed
