"""Named step-cost profiles: which serving system kvsim's clock models, with a source for every coefficient.

A profile is a set of `StepCostModel` coefficients (fractions of the catalog GPU's peaks and CPU terms), so
one profile serves every model and GPU of the catalog. ``--cost-profile NAME`` picks one; ``--cost-profile
FILE`` (or ``--calibration FILE``) takes a calibration table instead, as ``kvsim calibrate`` writes them.
``kvsim calibrate --list`` prints them. How each profile compares with measurements: ``docs/validation.md``.

- ``vllm-v1`` (the default): vLLM 0.11's V1 engine with CUDA graphs and FlashAttention. Coefficients come from
  the facts measured on two public vLLM 0.11 runs on an H100 (``inference-sim/inference-sim``'s ground truth,
  Apache-2.0; summarised in ``docs/validation.md``): batch-1 decode steps, prefill-only steps and mixed steps,
  which are *single steps*, not the per-request latencies the acceptance scores.
- ``paper-2023``: the SOSP'23 vLLM of the PagedAttention paper (A100, no CUDA graphs, Python per-sequence work).
  The roofline coefficients kvsim always used, plus a per-sequence CPU term, the only fitted coefficient:
  fitted to the paper's one ShareGPT figure (Fig. 13, mean batch 30.42 at 2 req/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from allocators.catalog import GpuSpec, ModelSpec
from sim.kernel.calibration_store import peaks_of
from sim.kernel.cost_model import DEFAULT_PAGED_KERNEL_OVERHEAD, CalibratedStepCost, StepCostModel

DEFAULT_PROFILE = "vllm-v1"


@dataclass(frozen=True)
class CostProfile:
    """Coefficients for `StepCostModel`, what system they model, and where each value comes from."""

    name: str
    system: str
    coefficients: dict
    sources: dict[str, str]
    checked: tuple[str, ...] = ()
    """What the whole profile was scored against (`docs/validation.md`): results it was not fitted to."""

    def model(self, model: ModelSpec, gpu: GpuSpec, **kwargs) -> StepCostModel:
        return StepCostModel(model=model, gpu=gpu, source=f"profile {self.name}", profile=self.name,
                             **self.coefficients, **kwargs)


VLLM_V1 = CostProfile(
    name="vllm-v1",
    system="vLLM 0.11 (V1 engine, CUDA graphs, FlashAttention), one H100-class GPU",
    coefficients=dict(bandwidth_frac=0.83, flops_frac=0.66, step_overhead_s=0.0018, seq_overhead_s=27e-6,
                      prefill_token_s=0.0, mixed_overlap=0.75, paged_kernel_overhead={16: 1.0}),
    sources={
        "bandwidth_frac": "batch-1 decode steps of vLLM 0.11 on an H100: 6.66 ms for Llama-2-7B (13.5 GB of "
                          "weights) and 26.06 ms for CodeLlama-34B (67.5 GB); the slope between the two models is "
                          "0.83 x 3.35 TB/s (real-vllm facts; docs/validation.md)",
        "step_overhead_s": "the intercept of the same two batch-1 decode steps: 1.8 ms per step (CUDA-graph "
                           "replay, scheduler, sampler and detokenizer of vLLM 0.11)",
        "flops_frac": "prefill-only steps: about 21 ms per 1,000 tokens for Llama-2-7B and 101-105 ms for "
                      "CodeLlama-34B, 0.64-0.68 of the H100's 989 TFLOP/s dense BF16 (midpoint)",
        "seq_overhead_s": "TPOT's error under a plain roofline barely changes from 1 to 24 running sequences: "
                          "a per-sequence term fitted to that slope is about 27 us (real-vllm facts)",
        "prefill_token_s": "0: prefill steps are explained by their FLOPs at flops_frac with no per-token residue",
        "mixed_overlap": "mixed steps of CodeLlama-34B with 64-token prefill chunks take 27.7 ms against 26.1 ms "
                         "for pure decode; 64 tokens of compute are about 6.6 ms, so about a quarter of the "
                         "smaller side is not hidden under the larger: 0.75",
        "paged_kernel_overhead": "1.0: FlashAttention's paged KV reads are folded into bandwidth_frac, which the "
                                 "batch-1 steps measured through the paged kernel",
    },
    checked=(
        "per-request latencies of the two real vLLM 0.11 runs on an H100 (its coefficients came from single "
        "steps of them): TTFT MAPE 7.1% and 3.3%, TPOT 7.1% and 0.8%, E2E 6.8% and 2.4%",
        "kvsim's own Llama-3-8B forward passes on an H200, CUDA graphs (2026-12-04): its GPU terms within 6.9% "
        "MAPE of the composed steps and 11-23% above the whole decode steps, where the engine's own per-step work "
        "should put it",
    ),
)

PAPER_2023 = CostProfile(
    name="paper-2023",
    system="vLLM as in the PagedAttention paper (SOSP'23): A100, no CUDA graphs, Python per-sequence work",
    coefficients=dict(bandwidth_frac=0.8, flops_frac=0.6, step_overhead_s=0.003, seq_overhead_s=2.36e-4,
                      prefill_token_s=0.0, mixed_overlap=1.0,
                      paged_kernel_overhead=dict(DEFAULT_PAGED_KERNEL_OVERHEAD)),
    sources={
        "bandwidth_frac": "kvsim's original roofline: decode GEMV and paged-attention kernels reach 75-85% of HBM "
                          "peak",
        "flops_frac": "kvsim's original roofline: large prefill GEMMs reach 50-70% of dense BF16 peak",
        "step_overhead_s": "kvsim's original roofline: a few ms of per-step CPU work",
        "seq_overhead_s": "fitted (the only fitted coefficient) so that `kvsim reproduce paper`'s ShareGPT at 2 "
                          "req/s batches vLLM's Fig. 13 mean of 30.42 requests (sim.reproduce.fit_paper)",
        "prefill_token_s": "0: not needed",
        "mixed_overlap": "1.0: the paper's vLLM ran no chunked prefill, so no mixed steps",
        "paged_kernel_overhead": "the paper's section 7.1 and Fig. 18a: its paged kernel 20-26% slower than a "
                                 "contiguous one",
    },
    checked=(
        "`kvsim reproduce paper` (docs/reproduction.md): Orca's mean batches within 20% of the paper's and vLLM's "
        "sustained rate over Orca (Max) inside 2.7x-8x, but over Orca (Oracle) 1.67x, under the paper's 1.7x-2.7x",
    ),
)

PROFILES: dict[str, CostProfile] = {p.name: p for p in (VLLM_V1, PAPER_2023)}


def is_table_path(name: str) -> bool:
    """A ``--cost-profile`` value naming a file rather than a profile."""
    return name not in PROFILES and (name.endswith(".json") or Path(name).is_file())


def get_profile(name: str) -> CostProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown cost profile {name!r}; valid choices: {', '.join(PROFILES)} "
                         "(or a calibration table .json)") from None


def make_step_cost(name: str | None, model: ModelSpec, gpu: GpuSpec, **kwargs) -> StepCostModel:
    """The step-cost model of profile ``name`` (default `DEFAULT_PROFILE`) or of a calibration table file;
    a table brings its measured CPU peaks (`peaks_of`) as it does under ``--calibration``, so that the two
    spellings of the same table give the same clock."""
    name = name or DEFAULT_PROFILE
    if is_table_path(name):
        return CalibratedStepCost.from_file(name, model, peaks_of(name, gpu), **kwargs)
    return get_profile(name).model(model, gpu, **kwargs)
