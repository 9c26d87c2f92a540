"""The figures the README quotes are what kvsim prints today: each is parsed out of the README's own text and
compared with a fresh run of its command, so a change that moves a number fails here until the README is
updated (nothing is copied into this file)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from sim.cli import main

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def run_json(args: list[str]):
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def readme_row(start: str) -> str:
    """The README table row whose first cell starts with ``start``."""
    return next(line for line in README.splitlines() if line.startswith(f"| {start}"))


def generate_trace(row: str, tmp_path, monkeypatch) -> None:
    """Run ``row``'s `kvsim trace generate` in ``tmp_path`` (made the working directory), as a reader would."""
    monkeypatch.chdir(tmp_path)
    generate = re.search(r"`kvsim (trace generate [^`]+)`", row).group(1)
    assert CliRunner().invoke(main, shlex.split(generate)).exit_code == 0


def generated_run(row: str, tmp_path, monkeypatch) -> list[str]:
    """A row of two commands, `kvsim trace generate` then `kvsim run ... --json`: the trace generated
    (`generate_trace`), the run's arguments returned without its ``--json``."""
    generate, run = re.findall(r"`kvsim ((?:trace generate|run) [^`]+)`", row)
    assert generate.startswith("trace generate") and run.endswith("--json")
    generate_trace(row, tmp_path, monkeypatch)
    return shlex.split(run)[:-1]


def quoted_compare_table() -> tuple[list[str], dict[str, list[str]]]:
    """The block after "What `kvsim compare` prints": allocators, and each metric's printed values."""
    block = README[README.index("What `kvsim compare` prints"):]
    block = block[block.index("```") + 3:]
    lines = block[:block.index("```")].strip().splitlines()
    header = lines[0].split()
    assert header[0] == "metric"
    return header[1:], {line.split()[0]: line.split()[1:] for line in lines[1:]}


@pytest.fixture(scope="module")
def compare_summaries() -> dict[str, dict]:
    return {s["allocator"]: s for s in run_json(["compare"])}


def test_the_quoted_compare_table_is_what_compare_prints(compare_summaries):
    allocators, table = quoted_compare_table()
    assert len(table) >= 5
    for metric, values in table.items():
        for allocator, quoted in zip(allocators, values, strict=True):
            assert f"{compare_summaries[allocator][metric]:.4g}" == quoted, (metric, allocator)


def test_the_prose_under_the_table_quotes_the_same_run(compare_summaries):
    text = " ".join(README[README.index("The contiguous allocators run"):].split())
    running = re.match(r"The contiguous allocators run ([\d.]+), ([\d.]+) and ([\d.]+) requests at once", text)
    for allocator, quoted in zip(("contiguous-max", "contiguous-pow2", "contiguous-oracle"), running.groups(),
                                 strict=True):
        decimals = len(quoted.split(".")[1]) if "." in quoted else 0
        assert round(compare_summaries[allocator]["mean_running"], decimals) == pytest.approx(float(quoted))
    wastes = re.search(r"Max wastes (\d+)% of memory", text).group(1)
    assert round(100 * compare_summaries["contiguous-max"]["internal_frag_frac"]) == int(wastes)
    fragmenting = re.search(r"fragmenting about ([\d.]+)% of memory", text).group(1)
    paged = compare_summaries["paged"]
    assert round(100 * (paged["internal_frag_frac"] + paged["external_frag_frac"]), 1) == float(fragmenting)


def test_the_capacity_row_quotes_what_capacity_prints():
    row = readme_row("How many requests fit")
    command, quoted = re.search(r"`kvsim (capacity [^`]+)` \(([^)]+)\)", row).groups()
    slots, kib, requests, unusable = re.fullmatch(
        r"([\d,]+) slots, ([\d.]+) KiB/token, ([\d,]+) requests, ([\d.]+)% unusable", quoted).groups()
    r = run_json(shlex.split(command))
    assert r["kv_capacity_tokens"] == int(slots.replace(",", ""))
    assert r["kv_bytes_per_token"] / 1024 == float(kib)
    assert r["max_concurrent_requests"] == int(requests.replace(",", ""))
    assert f"{100 * r['unusable_frac']:.2f}" == unusable


def test_the_host_tier_row_quotes_what_run_prints():
    """The host-tier row: hits with and without 16 GiB of host memory, then the two write policies at 16 and
    2 GiB (host hits and, at 16 GiB, GiB offloaded), then write-through at 16 GiB with a store threshold and
    with ARC."""
    row = readme_row("Does host memory for evicted KV")
    args = shlex.split(re.search(r"`(kvsim run [^`]+)`", row).group(1))[1:-1]  # without its --json
    text = " ".join(row.split())

    def number(pattern: str) -> list[float]:
        return [float(x.replace(",", "")) for x in re.search(pattern, text).groups()]

    def hits(gib: str, policy: str = "write_back", *more: str) -> dict:
        at = args.index("--cpu-offload-gib") + 1
        return run_json([*args[:at], gib, *args[at + 1:], "--offload-write-policy", policy, *more])

    gpu_only, back, through = hits("0"), hits("16"), hits("16", "write_through")
    before, after, host = number(r"from ([\d,]+) to ([\d,]+), ([\d,]+) of them loaded from the host")
    assert (gpu_only["gpu_hit_tokens"], back["gpu_hit_tokens"] + back["host_hit_tokens"]) == (before, after)
    assert back["host_hit_tokens"] == host
    through_hits, through_gib, back_hits, back_gib = number(
        r"([\d,]+) host hits for ([\d.]+) GiB offloaded, against write-back's ([\d,]+) for ([\d.]+) GiB")
    assert (through["host_hit_tokens"], back["host_hit_tokens"]) == (through_hits, back_hits)
    assert (round(through["offload_bytes"] / 2**30, 1), round(back["offload_bytes"] / 2**30, 1)) == (
        through_gib, back_gib)
    small_through, small_back = number(r"with `--cpu-offload-gib 2`, ([\d,]+) host hits against write-back's ([\d,]+)")
    assert (hits("2", "write_through")["host_hit_tokens"], hits("2")["host_hit_tokens"]) == (small_through, small_back)
    gib, filtered_hits, skipped = number(r"cuts the traffic to ([\d.]+) GiB offloaded for ([\d,]+) host hits, "
                                         r"([\d,]+) stores skipped")
    filtered = hits("16", "write_through", "--offload-store-threshold", "2")
    assert (round(filtered["offload_bytes"] / 2**30, 1), filtered["host_hit_tokens"]) == (gib, filtered_hits)
    assert filtered["offload_stores_skipped"] == skipped
    arc_hits, = number(r"`--offload-eviction-policy arc` \(vLLM's ARC host policy\) instead lifts its host hits to "
                       r"([\d,]+)")
    assert hits("16", "write_through", "--offload-eviction-policy", "arc")["host_hit_tokens"] == arc_hits


def test_the_parallel_sampling_row_quotes_what_run_prints(tmp_path, monkeypatch):
    """The many-samples row: its trace generated as the row says, then fan-out against fork."""
    row = readme_row("Many samples per prompt")
    args = generated_run(row, tmp_path, monkeypatch)
    at = args.index("--parallel-sampling") + 1
    fan, fork = (run_json([*args[:at], mode, *args[at + 1:]]) for mode in ("fan-out", "fork"))
    text = " ".join(row.split())
    quoted = [float(x.replace(",", "")) for x in re.search(
        r"fan-out sustains ([\d,]+) output tok/s against ([\d,]+), TTFT p50 ([\d.]+) s against ([\d.]+) s, with "
        r"([\d,]+) child preemptions against ([\d,]+) group ones", text).groups()]
    assert [round(fan["throughput_tok_s"]), round(fork["throughput_tok_s"]), round(fan["ttft_p50_s"], 1),
            round(fork["ttft_p50_s"], 1), fan["preemptions"], fork["preemptions"]] == quoted


def without(args: list[str], *flags: str) -> list[str]:
    """`args` less each of `flags` and the value after it."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        else:
            kept.append(arg)
    return kept


def test_the_disaggregation_row_quotes_what_run_prints(tmp_path, monkeypatch):
    """The P/D row: 1 prefill + 1 decode replica against two plain ones, on ShareGPT and on the generated
    6,000-token prompts."""
    row = readme_row("Split prefill and decode")
    args = shlex.split(re.search(r"`kvsim (run [^`]+)`", row).group(1))
    assert args[-1] == "--json"
    pd = args[:-1]
    plain = [*without(pd, "--prefill-replicas", "--decode-replicas", "--kv-transfer-config"), "--replicas", "2"]
    text = " ".join(row.split())

    def quoted(pattern: str) -> list[float]:
        return [float(x.replace(",", "")) for x in re.search(pattern, text).groups()]

    def latencies(a: dict, b: dict) -> list[float]:
        return [round(1000 * a["ttft_p50_s"]), round(1000 * b["ttft_p50_s"]), round(1000 * a["tpot_p50_s"], 1),
                round(1000 * b["tpot_p50_s"], 1)]

    assert latencies(run_json(pd), run_json(plain)) == quoted(
        r"TTFT p50 (\d+) ms against (\d+) ms, TPOT p50 ([\d.]+) against ([\d.]+) ms")
    generate_trace(row, tmp_path, monkeypatch)
    trace, model = re.search(r"run on `(\S+)` with `--model (\S+)`", text).groups()
    long_pd, long_plain = (run_json(["run", trace, *without(a[1:], "--preset", "--num-requests", "--rate", "--model"),
                                     "--model", model]) for a in (pd, plain))
    tpot_pd, tpot_plain, ttft_pd, ttft_plain = quoted(
        r"it buys TPOT p50 ([\d.]+) against ([\d.]+) ms for TTFT p50 (\d+) against (\d+) ms")
    assert latencies(long_pd, long_plain) == [ttft_pd, ttft_plain, tpot_pd, tpot_plain]
    assert long_pd["rejected"] == quoted(r"its ([\d,]+) prompts longer than")[0]


def test_the_sessions_row_quotes_what_kv_cost_prints(tmp_path, monkeypatch):
    """The chat-sessions row's `kv-cost` figures, with its default overlap weight and the weight the row names."""
    row = readme_row("Chat sessions over a fleet")
    args = generated_run(row, tmp_path, monkeypatch)
    at = args.index("--router") + 1
    args[at] = "kv-cost"
    text = " ".join(row.split())
    *figures, flag, weight = re.search(
        r"`kv-cost` \(.*?\) ([\d.]+)%, (\d+) ms, ([\d.]+) s, and ([\d.]+)%, (\d+) ms, ([\d.]+) s with `(\S+) (\d+)`",
        text).groups()
    measured = []
    for run_args in (args, [*args, flag, weight]):
        s = run_json(run_args)
        measured += [f"{100 * s['prefix_hit_frac']:.1f}", f"{1000 * s['ttft_p50_s']:.0f}", f"{s['ttft_p99_s']:.2f}"]
    assert measured == figures
