"""How long one engine step takes: a roofline over the catalog, a constant, or a calibrated table.

A step reads the weights once and the KV cache of every token it attends to, and does ``2 x params`` FLOPs
per token plus attention. Its time is the larger of the compute time and the memory time at achievable
fractions of the peaks, plus a fixed per-step overhead (scheduling, sampling, kernel launches)::

    t = overhead + seqs x seq_overhead + prefill_tokens x prefill_token
        + max(compute, memory) [+ (1 - mixed_overlap) x min(compute, memory) when the step prefills]
        + copy-on-write copies at HBM bandwidth + swap traffic over PCIe

    compute = flops / (flops_frac * peak_flops),  memory = bytes / (bandwidth_frac * peak_bw)

``seqs`` counts the sequences the step schedules (decoding ones and prefill chunks): the per-sequence CPU
work of scheduling, sampling and output processing. ``mixed_overlap`` is how much of the smaller of compute
and memory time hides under the larger in a step that prefills (1: a pure roofline; real mixed steps overlap
only partly). Pure decode steps keep the roofline's ``max``, so a decode run stays linear in the step index.

Copies and swaps are charged for the token slots they really move (slots x KV bytes per token), whatever the
allocator: a paged copy moves a whole block, a contiguous fork copies the parent's tokens into the child's
slab, a swap moves every block of a paged sequence or a slab's tokens in one transfer.

Named, sourced sets of coefficients are `sim.kernel.cost_profiles` (``--cost-profile``); the dataclass defaults
below are the plain roofline kvsim used before profiles existed (``paper-2023`` keeps them). Their sources:

- ``bandwidth_frac = 0.8``: decode GEMV and paged-attention kernels typically reach 75-85% of HBM peak.
- ``flops_frac = 0.6``: large prefill GEMMs typically reach 50-70% of dense BF16 peak (model FLOPs utilisation).
- ``step_overhead_s = 0.003``: vLLM's per-step CPU work (scheduling, block tables, sampling) is a few ms.
- ``paged_kernel_overhead``: the paper's paged attention kernel is 20-26% slower than a contiguous one
  (Kwon et al. 2023, section 7.1 and Fig. 18a), least so at 16-32 tokens per block; small blocks gather more.
  It multiplies the KV bytes read; contiguous allocators use 1.0.
- ``swap_copy_latency_s = 5e-6``: vLLM swaps with one ``cudaMemcpyAsync`` per block, layer and K/V, each
  costing a few microseconds, which is why swapping is poor at small block sizes (paper, section 7.4).

Tensor parallelism divides FLOPs and bytes over the GPUs (communication is not modelled).

A run of ``k`` pure decode steps of ``n`` sequences has durations linear in the step index on each side of
the roofline's crossover (the per-sequence term is a constant ``n x seq_overhead`` per step), so `decode_run` sums them, and their index-weighted sum, in closed form (O(1) per run).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from allocators import roofline
from allocators.catalog import GpuSpec, ModelSpec

DEFAULT_PAGED_KERNEL_OVERHEAD = {1: 1.6, 2: 1.45, 4: 1.34, 8: 1.26, 16: 1.2, 32: 1.2, 64: 1.22, 128: 1.26,
                                 256: 1.3}


def kernel_overhead(table: dict[int, float], block_size: int) -> float:
    """The table's factor at ``block_size``, log-linearly interpolated between its entries (clamped)."""
    if block_size in table:
        return table[block_size]
    sizes = sorted(table)
    if block_size <= sizes[0]:
        return table[sizes[0]]
    if block_size >= sizes[-1]:
        return table[sizes[-1]]
    hi = next(s for s in sizes if s > block_size)
    lo = max(s for s in sizes if s < block_size)
    w = (math.log(block_size) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return table[lo] + w * (table[hi] - table[lo])


def _linear_sums(lo: int, hi: int) -> tuple[int, int, int]:
    """(count, sum j, sum j^2) over integers lo <= j < hi."""
    if hi <= lo:
        return 0, 0, 0

    def s1(n: int) -> int:
        return n * (n - 1) // 2

    def s2(n: int) -> int:
        return (n - 1) * n * (2 * n - 1) // 6

    return hi - lo, s1(hi) - s1(lo), s2(hi) - s2(lo)


_NEVER = 1 << 53
"""A step index no run reaches: where the two lines cross further out than this, they never cross in a run
(and the index stays an exact float; an unclamped one can overflow a float when the slopes nearly agree)."""


def _first_step_at_or_after(x: float) -> int:
    """ceil(x) clamped to [0, `_NEVER`] (x may be huge or infinite)."""
    return 0 if x <= 0 else _NEVER if x >= _NEVER else math.ceil(x)


def _first_step_after(x: float) -> int:
    """floor(x) + 1 clamped to [0, `_NEVER`]."""
    return 0 if x < 0 else _NEVER if x >= _NEVER else math.floor(x) + 1


_Line = tuple[float, float]
"""A step time linear in the step index ``j``: ``(a, b)`` is ``a + b j`` (overhead excluded)."""


def _crossover(a1: float, b1: float, a2: float, b2: float) -> tuple[int, _Line, _Line]:
    """Where the decode lines of `StepCostModel._decode_lines` cross: ``(m, head, tail)``, step ``j`` costing
    ``head``'s `_Line` for ``j < m`` and ``tail``'s from ``m`` on. Parallel lines never cross: the larger
    wins throughout (``m = 0``)."""
    if b1 == b2:
        line = (a1, b1) if a1 >= a2 else (a2, b2)
        return 0, line, line
    if b1 > b2:  # compute wins from the crossover on
        return _first_step_at_or_after((a2 - a1) / (b1 - b2)), (a2, b2), (a1, b1)
    return _first_step_after((a2 - a1) / (b1 - b2)), (a1, b1), (a2, b2)  # compute wins up to it


@dataclass
class StepCostModel:
    """The roofline step-cost model (the default). See the module docstring for the formula and sources."""

    model: ModelSpec
    gpu: GpuSpec
    block_size: int = 16
    paged: bool = True
    tensor_parallel: int = 1
    bandwidth_frac: float = 0.8
    flops_frac: float = 0.6
    step_overhead_s: float = 0.003
    paged_kernel_overhead: dict[int, float] = field(default_factory=lambda: dict(DEFAULT_PAGED_KERNEL_OVERHEAD))
    swap_copy_latency_s: float = 5e-6
    seq_overhead_s: float = 0.0
    prefill_token_s: float = 0.0
    mixed_overlap: float = 1.0
    source: str = "roofline (default coefficients)"
    profile: str = ""

    def __post_init__(self) -> None:
        if not (0 < self.bandwidth_frac <= 1 and 0 < self.flops_frac <= 1 and self.step_overhead_s >= 0):
            raise ValueError("cost model: bandwidth_frac and flops_frac must be in (0, 1], step_overhead_s >= 0")
        if not (self.seq_overhead_s >= 0 and self.prefill_token_s >= 0 and 0 <= self.mixed_overlap <= 1):
            raise ValueError("cost model: seq_overhead_s and prefill_token_s must be >= 0, mixed_overlap in [0, 1]")
        m, tp = self.model, self.tensor_parallel
        flops_s = self.flops_frac * self.gpu.bf16_tflops * 1e12
        bytes_s = self.bandwidth_frac * self.gpu.hbm_bandwidth_gb_s * 1e9
        ovh = kernel_overhead(self.paged_kernel_overhead, self.block_size) if self.paged else 1.0
        kv = roofline.kv_bytes_per_token(m)
        # seconds per unit, per GPU
        self._t_token_flops = roofline.token_flops(m) / tp / flops_s
        self._t_pair_flops = roofline.pair_flops(m) / tp / flops_s
        self._t_weights = roofline.weight_bytes(m) / tp / bytes_s
        self._t_kv_read = kv * ovh / tp / bytes_s
        self._t_kv_write = kv / tp / bytes_s
        self._t_copy_slot = 2 * kv / tp / bytes_s  # read and write one token's KV in HBM
        self._t_swap_slot = kv / tp / (self.gpu.pcie_gb_s * 1e9)  # one token's KV over PCIe
        self._t_swap_transfer = 2 * m.num_layers * self.swap_copy_latency_s  # one copy call per layer, K and V

    def transfer_time(self, copy_slots: int = 0, swap_slots: int = 0, swap_transfers: int = 0) -> float:
        """Seconds for copies and swaps: the bytes really moved (``copy_slots`` token slots copied inside HBM,
        ``swap_slots`` over PCIe), plus a fixed latency per swap transfer (a block, or a whole slab)."""
        return (copy_slots * self._t_copy_slot + swap_slots * self._t_swap_slot
                + swap_transfers * self._t_swap_transfer)

    def step_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int, copies: int = 0,
                  swap_blocks: int = 0, attention_pairs: int | None = None, *, copy_slots: int | None = None,
                  swap_slots: int | None = None, prefill_seqs: int | None = None) -> float:
        """Seconds for one step. ``context_tokens``: KV tokens attention reads; ``attention_pairs``: query-key
        pairs (default ``context_tokens``, exact for decode; prefill chunks pass their triangle).
        ``prefill_seqs``: sequences the prefill tokens belong to (default: one if there are any).

        ``copies`` and ``swap_blocks`` count copy-on-write copies and swap transfers; ``copy_slots`` and
        ``swap_slots`` are the token slots they move (`StepPlan`), which is what is charged. Without them
        every copy and transfer is taken to be one block of ``block_size`` slots (exact for paged allocators,
        not for a contiguous slab)."""
        tokens = prefill_tokens + decode_seqs
        if tokens == 0 and copies == 0 and swap_blocks == 0 and not copy_slots and not swap_slots:
            return 0.0
        pairs = context_tokens if attention_pairs is None else attention_pairs
        compute = tokens * self._t_token_flops + pairs * self._t_pair_flops
        memory = self._t_weights + context_tokens * self._t_kv_read + tokens * self._t_kv_write
        longer, shorter = (compute, memory) if compute > memory else (memory, compute)
        t = self.step_overhead_s + longer
        if self.seq_overhead_s:
            seqs = decode_seqs + ((1 if prefill_tokens else 0) if prefill_seqs is None else prefill_seqs)
            t += seqs * self.seq_overhead_s
        if prefill_tokens:
            t += (1.0 - self.mixed_overlap) * shorter + prefill_tokens * self.prefill_token_s
        if copies or swap_blocks or copy_slots or swap_slots:
            t += self.transfer_time(copies * self.block_size if copy_slots is None else copy_slots,
                                    swap_blocks * self.block_size if swap_slots is None else swap_slots,
                                    swap_blocks)
        return t

    def _decode_lines(self, n: int, c0: int) -> tuple[float, float, float, float]:
        """Compute and memory time of decode step j as (a1 + b1 j, a2 + b2 j), context c0 + n j."""
        a1 = n * self._t_token_flops + c0 * self._t_pair_flops
        b1 = n * self._t_pair_flops
        a2 = self._t_weights + c0 * self._t_kv_read + n * self._t_kv_write
        b2 = n * self._t_kv_read
        return a1, b1, a2, b2

    def _per_step(self, n: int) -> float:
        """The fixed seconds of a decode step of ``n`` sequences: the step's own and ``n`` sequences' CPU work."""
        return self.step_overhead_s + n * self.seq_overhead_s

    def _sums(self, n: int, c0: int, k: int) -> tuple[float, float]:
        a1, b1, a2, b2 = self._decode_lines(n, c0)
        o = self._per_step(n)
        last = k - 1
        if (a2 >= a1) == (a2 + b2 * last >= a1 + b1 * last):  # one line wins at both ends, so throughout
            a, b = (a2, b2) if a2 >= a1 else (a1, b1)
            a += o
            sj = k * last // 2
            return a * k + b * sj, a * sj + b * (last * k * (2 * k - 1) // 6)
        # compute minus memory is linear in j, so one side wins on [0, m) and the other on [m, k)
        mc, head, tail = _crossover(a1, b1, a2, b2)
        m = min(mc, k)
        total = weighted = 0.0
        for (a, b), (lo, hi) in ((head, (0, m)), (tail, (m, k))):
            cnt, sj, sjj = _linear_sums(lo, hi)
            if cnt:
                a += o
                total += a * cnt + b * sj
                weighted += a * sj + b * sjj
        return total, weighted

    def decode_run(self, n: int, c0: int, k: int) -> tuple[float, float]:
        """For ``k`` decode steps of ``n`` sequences starting at context ``c0`` (growing by ``n`` a step):
        (sum of durations, sum of j x duration_j), j = 0..k-1."""
        if k <= 0 or n <= 0:
            return 0.0, 0.0
        return self._sums(n, c0, k)

    def decode_prefix(self, n: int, c0: int) -> Callable[[int], float]:
        """For decode steps of ``n`` sequences starting at context ``c0``: a function giving the seconds the
        first ``m`` steps take (when step ``m`` starts). O(1) per call: the fast-forward asks it once per
        sub-event to integrate memory without re-summing the run."""
        mc, head, tail = _crossover(*self._decode_lines(n, c0))
        o = self._per_step(n)
        ha, hb = head[0] + o, head[1] / 2
        ta, tb = tail[0] + o, tail[1] / 2
        at_mc = ha * mc + hb * (mc * (mc - 1))
        s_mc = mc * (mc - 1)

        def prefix(m: int) -> float:
            if m <= mc:
                return ha * m + hb * (m * (m - 1))
            return at_mc + ta * (m - mc) + tb * (m * (m - 1) - s_mc)

        return prefix

    def steps_starting_before(self, n: int, c0: int, k_max: int, horizon: float,
                              prefix: Callable[[int], float] | None = None) -> int:
        """How many of the next ``k_max`` decode steps start strictly before ``horizon`` seconds from now
        (at least 1: the first starts now).

        Durations never shrink along a run (context only grows), so ``horizon`` over the last and the first
        step's duration bracket the answer within a step or two; a short binary search settles it.
        ``prefix``: `decode_prefix` of the same ``n`` and ``c0``, if the caller has it already."""
        if prefix is None:
            prefix = self.decode_prefix(n, c0)
        if k_max <= 1 or prefix(k_max - 1) < horizon:
            return max(k_max, 1)
        # the largest m in [0, k_max - 2] whose start prefix(m) is before the horizon (prefix(0) = 0)
        lo, hi = 0, k_max - 2
        longest = prefix(k_max) - prefix(k_max - 1)
        shortest = prefix(1)
        if longest > 0:
            lo = min(max(math.ceil(horizon / longest) - 1, 0), hi)
            if prefix(lo) >= horizon:
                lo = 0
        if shortest > 0:
            hi = min(max(math.ceil(horizon / shortest), lo), hi)
            if hi < k_max - 2 and prefix(hi + 1) < horizon:
                hi = k_max - 2  # the bracket was off (rounding): search the whole range
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if prefix(mid) < horizon:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1 if prefix(lo) < horizon else 1

    def describe(self) -> dict:
        return {"cost_model": self.source, "cost_profile": self.profile, "bandwidth_frac": self.bandwidth_frac,
                "flops_frac": self.flops_frac, "step_overhead_s": self.step_overhead_s,
                "seq_overhead_s": self.seq_overhead_s, "prefill_token_s": self.prefill_token_s,
                "mixed_overlap": self.mixed_overlap}


class ConstantStepCost(StepCostModel):
    """Every step (prefill, decode, idle-free) takes ``step_time`` seconds, whatever it does: for
    hand-checkable scenarios and for ``--step-time``. Copies and swaps are free."""

    def __init__(self, step_time: float) -> None:
        if not step_time > 0:
            raise ValueError(f"step_time must be positive, got {step_time!r}")
        self.constant = float(step_time)
        self.source = f"constant {step_time:g} s"
        self.step_overhead_s = self.constant

    def step_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int, copies: int = 0,
                  swap_blocks: int = 0, attention_pairs: int | None = None, *, copy_slots: int | None = None,
                  swap_slots: int | None = None, prefill_seqs: int | None = None) -> float:
        return self.constant

    def transfer_time(self, copy_slots: int = 0, swap_slots: int = 0, swap_transfers: int = 0) -> float:
        return 0.0

    def _sums(self, n: int, c0: int, k: int) -> tuple[float, float]:
        return self.constant * k, self.constant * (k * (k - 1) // 2)

    def decode_prefix(self, n: int, c0: int) -> Callable[[int], float]:
        constant = self.constant
        return lambda m: constant * m

    def describe(self) -> dict:
        return {"cost_model": self.source}


OPTIONAL_COEFFICIENTS = {"seq_overhead_s": 0.0, "prefill_token_s": 0.0, "mixed_overlap": 1.0}
"""Terms a calibration table may leave out (version-1 tables, kernel calibrations that cannot see them):
absent, the step is a plain roofline."""


def coefficients_from_table(data: object, path: str | Path) -> dict:
    """The `StepCostModel` keyword arguments a ``kvsim-calibration`` table gives, checked field by field
    (one-line ValueError naming the file and the field)."""
    if not isinstance(data, dict) or data.get("format") != "kvsim-calibration":
        raise ValueError(f"{path}: not a kvsim calibration file (field 'format' must be 'kvsim-calibration')")
    coeffs = data.get("coefficients")
    if not isinstance(coeffs, dict):
        raise ValueError(f"{path}: field 'coefficients' is missing or not an object")
    values = {}
    for key in ("bandwidth_frac", "flops_frac", "step_overhead_s", *OPTIONAL_COEFFICIENTS):
        value = coeffs.get(key, OPTIONAL_COEFFICIENTS.get(key))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{path}: field 'coefficients.{key}' must be a number")
        values[key] = float(value)
    table = coeffs.get("paged_kernel_overhead", DEFAULT_PAGED_KERNEL_OVERHEAD)
    try:
        values["paged_kernel_overhead"] = {int(k): float(v) for k, v in table.items()}
    except (AttributeError, ValueError, TypeError):
        raise ValueError(f"{path}: field 'coefficients.paged_kernel_overhead' must map block sizes to "
                         "numbers") from None
    return values


def read_calibration(path: str | Path) -> dict:
    """A calibration table's JSON object, or a one-line ValueError naming the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read calibration file: {exc}") from None


class CalibratedStepCost(StepCostModel):
    """The step-cost model with coefficients from a calibration table: fitted on a real GPU by ``kvsim
    calibrate``, or to a measured run by ``kvsim calibrate --from-trace`` (``docs/validation.md``)."""

    @classmethod
    def from_file(cls, path: str | Path, model: ModelSpec, gpu: GpuSpec, **kwargs) -> CalibratedStepCost:
        path = Path(path)
        data = read_calibration(path)
        values = coefficients_from_table(data, path)
        if data.get("model") not in (None, model.name) or data.get("gpu") not in (None, gpu.name):
            raise ValueError(f"{path}: calibrated for {data.get('model')} on {data.get('gpu')}, not "
                             f"{model.name} on {gpu.name}")
        kwargs.setdefault("profile", str(path))
        return cls(model=model, gpu=gpu, source=f"calibrated ({path.name})", **values, **kwargs)
