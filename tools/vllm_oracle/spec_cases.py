"""Reference runs of vLLM's ngram speculative decoding: cases of ``cases.py`` rerun with drafts.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/spec_cases.py [--out tests/sim/data/vllm_oracle/spec] [CASE ...]

Each case is a case of ``cases.py`` (its trace and scheduler settings) plus ``num_speculative_tokens`` and
kvsim's ``spec_acceptance_rate``; the driver feeds vLLM's scheduler that many drafts after every step that
samples and accepts them as kvsim draws them (``driver.accepted_drafts``). Writes ``OUT/CASE/{trace.csv,
settings.json, steps.csv.gz, requests.csv, spec.json}``; reruns are byte-identical.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import cases  # noqa: E402
import driver  # noqa: E402

SPEC_CASES = {  # name -> (the case it reruns, num_speculative_tokens, acceptance rate)
    "ample": ("ample", 3, 0.6),
    "contended": ("contended", 2, 0.5),
    "max_num_seqs": ("max_num_seqs", 4, 0.8),
    "shared_prefix_cached": ("shared_prefix_cached", 3, 0.3),
    "small_budget_threshold": ("small_budget_threshold", 4, 0.7),
    "max_model_len_capped": ("max_model_len_capped", 3, 0.8),
    "priority_contended": ("priority_contended", 2, 0.6),
    "long_prefill_threshold": ("long_prefill_threshold", 3, 0.5),
    "offline_burst": ("offline_burst", 4, 0.4),
    "reserve_full_isl_off": ("reserve_full_isl_off", 3, 0.7),
    "shared_prefix_uncached": ("shared_prefix_uncached", 2, 0.8),
    "block_size_32": ("block_size_32", 5, 0.7),
    # drafts spanning more than a block (16 tokens): held blocks that later tokens fill and cache
    "contended_20_drafts": ("contended", 20, 0.9),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=list(SPEC_CASES))
    p.add_argument("--out", default="tests/sim/data/vllm_oracle/spec")
    a = p.parse_args()
    for name in a.names:
        base, k, rate = SPEC_CASES[name]
        out = Path(a.out) / name
        out.mkdir(parents=True, exist_ok=True)
        cases.write_trace(base, out / "trace.csv")
        settings = cases.settings(base) | {"num_speculative_tokens": k, "spec_acceptance_rate": rate}
        (out / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
        args = cases.driver_args(base, out / "trace.csv", out)
        args.num_speculative_tokens, args.spec_acceptance_rate = k, rate
        driver.run(args)
        driver.gzip_steps(out)
        print(name, "done", flush=True)


if __name__ == "__main__":
    main()
