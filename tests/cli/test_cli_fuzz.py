"""Random flag values through `kvsim run`, `compare`, `capacity` and `trace stats`: every outcome is a result
(exit 0) or a one-line usage error (exit 2), never a traceback, and no value makes memory run away.

Values mix the sensible with the hostile (negative, zero, huge, NaN, infinity, words where numbers go); runs
are kept small (a few requests) so tens of examples take seconds."""

from __future__ import annotations

import tracemalloc

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main
from tests.soak import examples
from workloads.presets import SAMPLES_DIR

SAMPLE = SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv"
MEMORY_LIMIT = 600 * 1024**2
"""Peak Python-traced allocation (numpy included) one command may reach."""

NUMBERS = st.sampled_from(["-1", "0", "0.5", "1", "3", "16", "1e9", "1e30", "nan", "inf", "-inf", "abc", "",
                           "2048", "99999999999999999999"])
COUNTS = st.sampled_from(["-5", "0", "1", "7", "1.5", "x", "1000000000", "99999999999999999999"])
NAMES = st.sampled_from(["opt-13b", "llama-3-8b", "a100-40gb", "h200", "cpu", "paged", "contiguous-max",
                         "nope", "", "OPT-13B"])

SIMULATION_FLAGS = {
    "--model": st.sampled_from(["opt-13b", "llama-2-7b", "nope"]),
    "--gpu": st.sampled_from(["a100-40gb", "l4", "cpu", "nope"]),
    "--kv-gib": NUMBERS,
    "--kv-tokens": COUNTS,
    "--tensor-parallel": COUNTS,
    "--gpu-memory-utilization": NUMBERS,
    "--block-size": COUNTS,
    "--placement": st.sampled_from(["buddy", "first-fit", "best-fit", "worst-fit"]),
    "--max-model-len": COUNTS,
    "--rate": NUMBERS,
    "--seed": COUNTS,
    "--scheduler": st.sampled_from(["continuous", "static", "dask"]),
    "--max-num-seqs": COUNTS,
    "--max-num-batched-tokens": COUNTS,
    "--preemption": st.sampled_from(["recompute", "swap", "drop"]),
    "--swap-space-gib": NUMBERS,
    "--watermark": NUMBERS,
    "--step-time": NUMBERS,
    "--preset": st.sampled_from(["sharegpt-paper", "alpaca-paper", "azure-conv", "nope"]),
}
CAPACITY_FLAGS = {
    "--model": NAMES, "--gpu": NAMES, "--kv-gib": NUMBERS, "--kv-tokens": COUNTS, "--tensor-parallel": COUNTS,
    "--gpu-memory-utilization": NUMBERS, "--allocator": NAMES, "--block-size": COUNTS,
    "--placement": st.sampled_from(["buddy", "best-fit", "x"]), "--prompt-len": COUNTS, "--output-len": COUNTS,
    "--max-model-len": COUNTS,
}
TRACE_FLAGS = {
    "--format": st.sampled_from(["azure", "mooncake", "kvsim", "vidur", "burstgpt", "nope"]),
    "--columns": st.sampled_from(["prompt_tokens=ContextTokens", "a=b,c=d", "=", "prompt_tokens=", "x",
                                  "output_tokens=GeneratedTokens,prompt_tokens=ContextTokens"]),
}


def flag_values(flags: dict) -> st.SearchStrategy[list[str]]:
    """A random subset of ``flags``, each with a random value, as an argument list."""
    return st.dictionaries(st.sampled_from(sorted(flags)), st.just(None), max_size=5).flatmap(
        lambda chosen: st.tuples(*(flags[name] for name in chosen)).map(
            lambda values: [arg for name, value in zip(chosen, values, strict=True) for arg in (name, value)]))


def check(args: list[str]) -> None:
    tracemalloc.start()
    try:
        result = CliRunner().invoke(main, args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code in (0, 2), (args, result.output, result.exception)
    assert "Traceback" not in result.output, (args, result.output)
    if result.exit_code == 2:
        errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1, (args, result.output)
    assert peak < MEMORY_LIMIT, (args, peak)


FUZZ = settings(max_examples=examples(30), deadline=20_000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(command=st.sampled_from(["run", "compare"]), flags=flag_values(SIMULATION_FLAGS),
       trace=st.booleans(), allocator=st.sampled_from(["paged", "contiguous-max", "paged-cow", "nope"]))
def test_run_and_compare_never_crash(command, flags, trace, allocator):
    args = [command, *flags, "--num-requests", "8", "--json"]
    if trace:
        args.insert(1, str(SAMPLE))
        args = [a for i, a in enumerate(args) if a != "--preset" and (i == 0 or args[i - 1] != "--preset")]
    args += ["--allocator" if command == "run" else "--allocators", allocator]
    check(args)


@FUZZ
@given(flags=flag_values(CAPACITY_FLAGS))
def test_capacity_never_crashes(flags):
    check(["capacity", *flags, "--json"])


@FUZZ
@given(flags=flag_values(TRACE_FLAGS), skip=st.booleans())
def test_trace_stats_never_crashes(flags, skip):
    check(["trace", "stats", str(SAMPLE), *flags, *(["--skip-bad-rows"] if skip else [])])
