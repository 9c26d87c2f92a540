"""Settings that change nothing in a run are reported, never silently accepted: ``--cpu-offload-gib`` where no
host tier can sit (no prefix cache to spill: a contiguous allocator or vAttention, or prefix caching off),
pages, placement, a long-prefill threshold or ``lpm`` where they do not apply. The summary carries them
(``ignored_settings``: flag -> why) and ``kvsim run``/``compare`` warn."""

import dataclasses
import json
import warnings

import pytest
from click.testing import CliRunner

import workloads
from allocators import ALLOCATORS, allocator_class
from allocators.catalog import get_gpu, get_model
from sim.cli import main
from sim.kernel.config import SimConfig
from sim.kernel.ignored_settings import ignored_settings
from sim.kernel.metrics import Recorder
from sim.kernel.replica import build_replica, hybrid_kv_groups, resolve_capacity
from sim.kernel.runner import run_simulation


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize("model_name", ["llama-3-8b", "gemma-3-12b"])
@pytest.mark.parametrize("prefix_caching", [True, False])
def test_the_host_tier_is_reported_exactly_when_none_is_attached(allocator, model_name, prefix_caching):
    config = SimConfig(allocator=allocator, model=model_name, gpu="h100-80gb", kv_tokens=40_000,
                       cpu_offload_gib=1.0, prefix_caching=prefix_caching)
    model = get_model(model_name)
    memory, _, _ = build_replica(config, model, get_gpu("h100-80gb"), 40_000, Recorder(0))
    ignored = ignored_settings(config, bool(hybrid_kv_groups(config, model)))
    assert ("--cpu-offload-gib 1" not in ignored) == (memory.host_tier is not None)
    if allocator_class(allocator).supports_host_tier and prefix_caching:
        assert ignored == {}


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize("prefix_caching", [True, False])
def test_lpm_is_reported_exactly_when_no_prefix_cache_is_kept(allocator, prefix_caching):
    config = SimConfig(allocator=allocator, model="llama-3-8b", gpu="h100-80gb", kv_tokens=40_000,
                       scheduling_policy="lpm", prefix_caching=prefix_caching)
    model = get_model("llama-3-8b")
    memory, _, _ = build_replica(config, model, get_gpu("h100-80gb"), 40_000, Recorder(0))
    ignored = ignored_settings(config, False)
    assert ("--scheduling-policy lpm" in ignored) == (not getattr(memory._alloc, "prefix_caching", False))


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize("setting", [{"block_size": 32}, {"watermark": 0.2}])
def test_block_settings_are_reported_exactly_when_they_change_nothing(allocator, setting):
    """``--block-size`` and ``--watermark`` act on block pools: on an allocator without one the run is the
    default run to the digit (so it is reported), on a paged one it moves (so it is not)."""
    workload = workloads.load_preset("sharegpt-paper", num_requests=300, rate=4.0, seed=0)
    base = SimConfig(allocator=allocator, kv_tokens=5000, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the ignored setting's own warning
        plain, varied = (run_simulation(c, workload).summary for c in (base, dataclasses.replace(base, **setting)))
    moved = {k for k in plain.keys() | varied.keys() if plain.get(k) != varied.get(k)} - {"wall_time_s", "block_size"}
    ignored = varied.get("ignored_settings", {})
    flag = next(iter(ignored), None)
    assert (flag is not None) == (moved == {"ignored_settings"}), (ignored, moved)


def test_defaults_are_never_reported():
    for allocator in ALLOCATORS:
        config = SimConfig(allocator=allocator, model="llama-3-8b", gpu="h100-80gb", kv_tokens=40_000)
        assert ignored_settings(config, False) == {}


@pytest.mark.parametrize("args,flag,why", [
    (["--allocator", "contiguous-max", "--cpu-offload-gib", "2"], "--cpu-offload-gib 2",
     "contiguous-max keeps no prefix cache to spill (a host tier sits behind paged, paged-cow, radix)"),
    (["--no-prefix-caching", "--cpu-offload-gib", "2"], "--cpu-offload-gib 2", "prefix caching is off"),
    (["--model", "gemma-3-12b", "--gpu", "h100-80gb", "--no-prefix-caching", "--cpu-offload-gib", "2"],
     "--cpu-offload-gib 2", "prefix caching is off"),
    (["--page-size-kib", "64"], "--page-size-kib 64", "only vattention maps pages"),
    (["--placement", "first-fit"], "--placement first-fit", "slab placement applies to contiguous allocators"),
    (["--no-chunked-prefill", "--long-prefill-token-threshold", "100"], "--long-prefill-token-threshold 100",
     "it caps prefill chunks"),
    (["--scheduling-policy", "lpm", "--allocator", "contiguous-oracle"], "--scheduling-policy lpm",
     "it orders by cached prefix, and this run keeps no prefix cache"),
    (["--lpm-max-queue", "0"], "--lpm-max-queue 0", "it bounds lpm's sort, and this run's policy is fcfs"),
    (["--cache-aware-admission-window", "8", "--scheduling-policy", "priority"], "--cache-aware-admission-window 8",
     "vLLM reorders by cached prefix under fcfs only, and this run's policy is priority"),
    (["--cache-aware-admission-window", "8", "--no-prefix-caching"], "--cache-aware-admission-window 8",
     "it reorders by cached prefix, and prefix caching is off"),
    (["--cache-aware-admission-window", "8", "--allocator", "radix"], "--cache-aware-admission-window 8",
     "it is vLLM v1's scheduler's, modelled with --allocator paged"),
    (["--cache-aware-admission-threshold", "0.2"], "--cache-aware-admission-threshold 0.2",
     "it gates --cache-aware-admission-window, which is 0"),
    (["--long-prefill-token-threshold-adaptive"], "--long-prefill-token-threshold-adaptive",
     "it floors --long-prefill-token-threshold, which is 0"),
    (["--max-num-active-seqs", "256"], "--max-num-active-seqs 256",
     "it lowers the admission cap below --max-num-seqs, and equals it"),
    (["--prefill-schedule-interval", "4", "--scheduler", "static"], "--prefill-schedule-interval 4",
     "it holds prefill to one engine step in N, and static batching prefills a batch only when the last has "
     "finished"),
    (["--swap-space-gib", "8"], "--swap-space-gib 8", "nothing is swapped: preemption is recompute"),
    (["--preemption", "swap", "--swap-space-gib", "8", "--cpu-offload-gib", "2"], "--swap-space-gib 8",
     "swapped KV goes to the host tier (--cpu-offload-gib), not to the swap space"),
    (["--preemption", "swap", "--swap-space-gib", "0"], "--preemption swap", "there is no host memory to swap into"),
    (["--step-time", "0.01", "--cost-profile", "paper-2023"], "--cost-profile paper-2023",
     "--step-time 0.01 fixes every step's time"),
    (["--beam-keep-prob", "0.5"], "--beam-keep-prob 0.5",
     "it is the chance a beam keeps its own lineage, and no request of this workload is a beam search"),
    (["--scheduler", "static", "--no-scheduler-reserve-full-isl"], "--no-scheduler-reserve-full-isl",
     "it admits a prompt on room for its first chunk alone, and this run has no chunked prefill"),
    (["--allocator", "vattention", "--no-scheduler-reserve-full-isl"], "--no-scheduler-reserve-full-isl",
     "it admits a prompt on room for its first chunk alone, and vattention holds a whole prompt from its admission"),
    (["--allocator", "contiguous-max", "--preemption", "swap"], "--preemption swap",
     "contiguous-max reserves each sequence's final length when it admits it and no request forks"),
])
def test_run_warns_and_the_summary_says_why(args, flag, why):
    result = CliRunner().invoke(main, ["run", "--num-requests", "5", "--json", *args])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert list(summary["ignored_settings"]) == [flag] and summary["ignored_settings"][flag].startswith(why)
    assert f"Warning: {summary['allocator']}: {flag} ignored: {why}" in result.stderr


def test_the_clock_sources_a_stronger_one_overrides_are_reported():
    """``--step-time`` wins over ``--calibration`` and ``--cost-profile``, ``--calibration`` over
    ``--cost-profile`` (`make_cost_model`): the one that loses is reported, the one that wins is not."""
    table = "sim/data/calibration/cpu/llama-3-8b.json"
    both = SimConfig(model="llama-3-8b", gpu="cpu", calibration=table, cost_profile="paper-2023")
    assert ignored_settings(both, False) == {"--cost-profile paper-2023": f"--calibration {table} sets the clock"}
    fixed = dataclasses.replace(both, step_time=0.01)
    assert set(ignored_settings(fixed, False)) == {f"--calibration {table}", "--cost-profile paper-2023"}
    assert ignored_settings(dataclasses.replace(both, cost_profile=None), False) == {}


def test_swap_preemption_with_swap_space_or_a_tier_is_not_reported():
    for extra in ({}, {"swap_space_gib": 8.0}, {"cpu_offload_gib": 2.0}):
        assert ignored_settings(SimConfig(preemption="swap", **extra), False) == {}, extra


def test_a_used_host_tier_is_not_reported():
    result = CliRunner().invoke(main, ["run", "--num-requests", "5", "--cpu-offload-gib", "2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert "ignored_settings" not in summary and summary["host_tier_blocks"] > 0
    assert "ignored" not in result.stderr


@pytest.mark.parametrize("router", ["round-robin", "prefix-aware", "kv-cost"])
@pytest.mark.parametrize("replicas", [1, 3])
def test_router_settings_are_reported_where_no_router_reads_them(router, replicas):
    """A router on one replica routes nothing; a router's weight is read by that router alone, on a fleet."""
    config = SimConfig(router=router, replicas=replicas, router_load_weight=2.0, router_kv_overlap_score_weight=3.0)
    ignored = ignored_settings(config, False)
    assert ("--router " + router in ignored) == (replicas == 1 and router != "round-robin")
    assert ("--router-load-weight 2" in ignored) == (replicas == 1 or router != "prefix-aware")
    assert ("--router-kv-overlap-score-weight 3" in ignored) == (replicas == 1 or router != "kv-cost")
    assert ignored_settings(SimConfig(router=router, replicas=replicas), False) == (
        {"--router " + router: "one replica (--replicas 1): every request goes to it"}
        if replicas == 1 and router != "round-robin" else {})


def test_session_affinity_without_sessions_is_reported():
    config = SimConfig(router="session-affinity", replicas=2)
    assert "--router session-affinity" in ignored_settings(config, False, sessions=False)
    assert ignored_settings(config, False, sessions=True) == {}


def test_a_max_model_len_beyond_the_models_context_is_noted():
    """vLLM refuses a --max-model-len above the model's own context (unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1);
    kvsim runs it, and says so in the summary and as a note."""
    result = CliRunner().invoke(main, ["run", "--max-model-len", "4096", "--num-requests", "5", "--json"])
    assert result.exit_code == 0, result.output
    note = json.loads(result.stdout)["beyond_model_context"]
    assert note.startswith("--max-model-len 4,096 exceeds opt-13b's own context of 2,048 tokens")
    assert f"Note: {note}" in result.stderr
    plain = CliRunner().invoke(main, ["run", "--max-model-len", "2048", "--num-requests", "5", "--json"])
    assert "beyond_model_context" not in json.loads(plain.stdout) and "Note: --max-model-len" not in plain.stderr


@pytest.mark.parametrize(("model", "allocator", "reported"), [
    ("gemma-3-12b", "paged", None),  # window and full layers: vLLM makes the windows full attention
    ("gpt-oss-20b", "paged", None),
    ("mistral-7b", "paged", "every layer of mistral-7b has a sliding window"),  # one uniform spec: kept
    ("llama-3-8b", "paged", "llama-3-8b has no sliding-window or chunked-local layers"),
    ("gemma-3-12b", "radix", "only paged is vLLM's hybrid KV cache manager"),
])
def test_disabling_the_hybrid_manager_is_reported_where_vllm_would_change_nothing(model, allocator, reported):
    """vLLM's ``unify_hybrid_kv_cache_specs`` turns window layers into full attention only beside full-attention
    layers; where it changes nothing the pool is the one without the flag, and the flag is reported."""
    config = SimConfig(allocator=allocator, model=model, gpu="h100-80gb", kv_tokens=40_000,
                       disable_hybrid_kv_cache_manager=True)
    spec = get_model(model)
    groups = hybrid_kv_groups(config, spec)
    why = ignored_settings(config, bool(groups), model=spec).get("--disable-hybrid-kv-cache-manager")
    assert (why is None) == (reported is None) and (reported is None or why.startswith(reported))
    plain = hybrid_kv_groups(dataclasses.replace(config, disable_hybrid_kv_cache_manager=False), spec)
    assert (groups == plain) == (reported is not None)


def test_deployment_and_workload_settings_that_change_nothing_are_reported():
    """A utilization under a given KV size (it only sizes a derived one), eager mode (vLLM 0.11 sizes the KV cache
    before it captures CUDA graphs), a token budget under static batching, and a priority column under a policy
    that does not read it (vLLM refuses that)."""
    given = SimConfig(kv_gib=10.0, gpu_memory_utilization=0.5)
    assert list(ignored_settings(given, False)) == ["--gpu-memory-utilization 0.5"]
    assert ignored_settings(dataclasses.replace(given, kv_gib=None), False) == {}
    assert list(ignored_settings(SimConfig(enforce_eager=True), False)) == ["--enforce-eager"]
    eager = SimConfig(model="opt-13b", gpu="a100-40gb", enforce_eager=True)
    assert resolve_capacity(eager).kv_tokens == resolve_capacity(SimConfig(model="opt-13b", gpu="a100-40gb")).kv_tokens
    static = SimConfig(scheduler="static", max_num_batched_tokens=256)
    assert list(ignored_settings(static, False)) == ["--max-num-batched-tokens 256"]
    assert ignored_settings(dataclasses.replace(static, scheduler="continuous"), False) == {}
    for policy, reported in (("fcfs", True), ("lpm", True), ("priority", False)):
        config = SimConfig(scheduling_policy=policy)
        assert ("priority column" in ignored_settings(config, False, priorities=True)) == reported
    frame = workloads.workload_to_frame(workloads.load_preset("sharegpt-demo", num_requests=20, seed=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for priority, reported in ((0, False), (1, True)):
            summary = run_simulation(SimConfig(kv_tokens=5000),
                                     workloads.workload_from_frame(frame.assign(priority=priority))).summary
            assert ("priority column" in summary.get("ignored_settings", {})) == reported


def test_a_host_tier_smaller_than_one_block_is_reported():
    """--cpu-offload-gib below one host block made a tier of 0 blocks: no hit, no traffic, no word."""
    workload = workloads.load_preset("sharegpt-demo", num_requests=20, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        summary = run_simulation(SimConfig(kv_tokens=5000, cpu_offload_gib=0.0001), workload).summary
    assert summary["host_tier_blocks"] == 0
    assert summary["ignored_settings"]["--cpu-offload-gib 0.0001"] == (
        "it is less than one host block (13,107,200 bytes), so the tier holds nothing")


def _moved_and_ignored(base: SimConfig, setting: dict, workload) -> tuple[set, dict]:
    """The summary keys ``setting`` changes over ``base`` (the run's wall time aside), and what it reports."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the ignored setting's own warning
        plain, varied = (run_simulation(c, workload).summary for c in (base, dataclasses.replace(base, **setting)))
    moved = {k for k in plain.keys() | varied.keys() if plain.get(k) != varied.get(k)} - {"wall_time_s"}
    return moved, varied.get("ignored_settings", {})


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize(("base", "setting", "flag"), [
    ({}, {"beam_keep_prob": 0.5}, "--beam-keep-prob 0.5"),
    ({}, {"scheduler_reserve_full_isl": False}, "--no-scheduler-reserve-full-isl"),
    ({"chunked_prefill": False}, {"scheduler_reserve_full_isl": False}, "--no-scheduler-reserve-full-isl"),
    ({"scheduler": "static"}, {"scheduler_reserve_full_isl": False}, "--no-scheduler-reserve-full-isl"),
    ({}, {"preemption": "swap"}, "--preemption swap"),
])
def test_settings_that_need_beams_chunks_or_preemption_are_reported_exactly_when_they_change_nothing(
        allocator, base, setting, flag):
    """On a workload with no beam and no fork: ``--beam-keep-prob`` picks beams only; the prompt reservation
    only gates a chunked prefill's first chunk on an allocator that allocates chunk by chunk; and an allocator
    that reserves each sequence's final length (the contiguous slabs) never preempts, so there is nothing to swap.
    They were accepted without a word; now they are reported exactly where the run is the run without them."""
    workload = workloads.load_preset("sharegpt-paper", num_requests=300, rate=4.0, seed=0)
    moved, ignored = _moved_and_ignored(SimConfig(allocator=allocator, kv_tokens=5000, seed=0, **base), setting,
                                        workload)
    assert moved, "the setting changed nothing and nothing said so"
    assert (flag in ignored) == (moved == {"ignored_settings"}), (ignored, moved)
    assert set(ignored) <= {flag}


def test_beams_and_forks_keep_the_settings_they_act_on():
    """A beam search reads ``--beam-keep-prob``, and its forks can make even a contiguous pool preempt (a fork
    places a new slab), so neither it nor ``--preemption swap`` is reported there."""
    frame = workloads.workload_to_frame(workloads.load_preset("sharegpt-paper", num_requests=200, rate=8.0, seed=0))
    beams = workloads.workload_from_frame(frame.assign(beam_width=4))
    for allocator, setting in (("paged", {"beam_keep_prob": 0.5}), ("contiguous-pow2", {"preemption": "swap"})):
        moved, ignored = _moved_and_ignored(SimConfig(allocator=allocator, kv_tokens=20_000, seed=0), setting, beams)
        assert ignored == {} and "e2e_p50_s" in moved, (allocator, moved)
    config = SimConfig(allocator="contiguous-max", preemption="swap", beam_keep_prob=0.5)
    assert ignored_settings(config, False, beams=True, forks=True) == {}
    assert list(ignored_settings(config, False, beams=False, forks=True)) == ["--beam-keep-prob 0.5"]
    assert list(ignored_settings(dataclasses.replace(config, allocator="vattention"), False, beams=True,
                                 forks=False)) == []


def test_the_adaptive_floor_goes_with_the_threshold_it_floors():
    """Without chunked prefill the threshold caps nothing, so its floor changes nothing either: both reported."""
    config = SimConfig(long_prefill_token_threshold=64, long_prefill_token_threshold_adaptive=True,
                       chunked_prefill=False)
    ignored = ignored_settings(config, False)
    assert list(ignored) == ["--long-prefill-token-threshold 64", "--long-prefill-token-threshold-adaptive"]
    assert ignored["--long-prefill-token-threshold-adaptive"].endswith("this run has no chunked prefill")
