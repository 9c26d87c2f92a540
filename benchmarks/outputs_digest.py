"""Digest of what kvsim writes for a fixed set of runs: the check that a speed change changed no output.

Why: the allocators' hot paths are rewritten for speed (pages handled in runs instead of one by one), and
every such change must leave each table and summary byte for byte as it was. This runs a set of
configurations through `kvsim run --out` (the shipped samples only, so it needs no ``$KVSIM_TRACES``) and
prints one sha256 per run over every file written, ``wall_time_s`` (the only non-deterministic value) left
out. Run it before and after a change and compare::

    python benchmarks/outputs_digest.py > before.txt   # on the old code
    python benchmarks/outputs_digest.py > after.txt    # on the new code
    diff before.txt after.txt                          # no output: nothing changed

``--only SUBSTRING`` runs the configurations whose name contains it; ``--list`` names them. ``--drop-key KEY``
(repeatable) leaves a JSON key out as ``wall_time_s`` is, to compare across a change that only adds keys (run
both sides with the same keys dropped); ``--drop-column COL`` (repeatable) leaves a column of the CSV tables out
the same way, for a change that only adds a column. ``--keep DIR`` keeps each run's files in ``DIR/NAME``, to see which
table a change moved. A ``{NAME}``
argument is a trace `TRACES` generates first (`kvsim trace generate`, seeded): the closed-loop and session
workloads, whose arrivals the simulation releases.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_MOONCAKE = ["--preset", "mooncake-conv", "--model", "llama-3-8b", "--gpu", "a100-40gb", "--num-requests", "600",
             "--max-num-batched-tokens", "8192", "--kv-tokens", "120000"]
_QWEN = ["--preset", "mooncake-conv", "--model", "qwen3-8b", "--gpu", "h200", "--num-requests", "500",
         "--max-num-batched-tokens", "8192", "--kv-tokens", "200000", "--cpu-offload-gib", "6"]
_AZURE = ["--preset", "azure-conv", "--model", "llama-2-7b", "--gpu", "a100-40gb", "--num-requests", "800",
          "--rate", "6"]
_SESSIONS = ["--preset", "sharegpt-demo", "--num-requests", "300"]
_HYBRID = ["--preset", "mooncake-conv", "--num-requests", "200", "--allocator", "paged"]  # vLLM's hybrid manager
_CHAT = "lognormal:prompt_mean=600,prompt_cv=1,output_mean=200,output_cv=1,max_total=4000"
TRACES: dict[str, list[str]] = {
    "closed.csv": ["--lengths", _CHAT, "--arrivals", "closed:users=48,think_s=0.5", "--num-requests", "400"],
    "sessions.csv": ["--lengths", _CHAT, "--arrivals", "poisson:rate=2", "--num-requests", "400", "--turns", "4",
                     "--think-time-s", "2", "--system-prompt-len", "200", "--system-prompt-frac", "0.5"],
}
_LLAMA = ["--model", "llama-3-8b", "--gpu", "a100-40gb"]

CONFIGS: dict[str, list[str]] = {
    "paged-mooncake": _MOONCAKE + ["--allocator", "paged"],
    "paged-mooncake-host": _MOONCAKE + ["--allocator", "paged", "--cpu-offload-gib", "2"],
    "paged-mooncake-nocache": _MOONCAKE + ["--allocator", "paged", "--no-prefix-caching"],
    "paged-mooncake-step": _MOONCAKE + ["--allocator", "paged", "--step-by-step", "--num-requests", "200"],
    "radix-mooncake": _MOONCAKE + ["--allocator", "radix"],
    "radix-mooncake-host": _MOONCAKE + ["--allocator", "radix", "--cpu-offload-gib", "2"],
    "paged-mooncake-host-through": _MOONCAKE + ["--allocator", "paged", "--cpu-offload-gib", "2",
                                                "--offload-write-policy", "write_through"],
    "radix-mooncake-host-through": _MOONCAKE + ["--allocator", "radix", "--cpu-offload-gib", "2",
                                                "--offload-write-policy", "write_through"],
    "radix-mooncake-host-through-big": _MOONCAKE + ["--allocator", "radix", "--cpu-offload-gib", "24",
                                                    "--offload-write-policy", "write_through"],
    "radix-mooncake-host-arc": _MOONCAKE + ["--allocator", "radix", "--cpu-offload-gib", "24",
                                            "--offload-write-policy", "write_through",
                                            "--offload-eviction-policy", "arc"],
    "radix-mooncake-host-threshold": _MOONCAKE + ["--allocator", "radix", "--cpu-offload-gib", "2",
                                                  "--offload-write-policy", "write_through",
                                                  "--offload-store-threshold", "2"],
    "radix-mooncake-host-swap": _MOONCAKE + ["--allocator", "radix", "--cpu-offload-gib", "2", "--preemption",
                                             "swap", "--kv-tokens", "60000"],
    "radix-mooncake-bs4": _MOONCAKE + ["--allocator", "radix", "--block-size", "4", "--num-requests", "200"],
    "radix-mooncake-bs1": _MOONCAKE + ["--allocator", "radix", "--block-size", "1", "--num-requests", "60"],
    "radix-mooncake-lpm": _MOONCAKE + ["--allocator", "radix", "--scheduling-policy", "lpm"],
    "radix-mooncake-step": _MOONCAKE + ["--allocator", "radix", "--cpu-offload-gib", "2", "--step-by-step",
                                        "--num-requests", "200"],
    "paged-mooncake-tight": _QWEN + ["--allocator", "paged"],
    "radix-mooncake-tight": _QWEN + ["--allocator", "radix"],
    "paged-azure": _AZURE + ["--allocator", "paged"],
    "paged-azure-swap": _AZURE + ["--allocator", "paged", "--preemption", "swap", "--kv-tokens", "30000"],
    "radix-azure": _AZURE + ["--allocator", "radix", "--kv-tokens", "30000"],
    "paged-cow-demo": _SESSIONS + ["--allocator", "paged-cow"],
    "paged-demo-fleet": _SESSIONS + ["--allocator", "paged", "--replicas", "3", "--router", "prefix-aware"],
    "radix-demo-fleet": _SESSIONS + ["--allocator", "radix", "--replicas", "3", "--router", "least-kv"],
    "hybrid-gemma": _HYBRID + ["--model", "gemma-3-12b", "--gpu", "h100-80gb"],
    "hybrid-gpt-oss-step": _HYBRID + ["--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--kv-tokens", "60000",
                                      "--step-by-step"],
    "hybrid-mistral-lpm": _HYBRID + ["--model", "mistral-7b", "--gpu", "a100-80gb", "--kv-tokens", "30000",
                                     "--scheduling-policy", "lpm"],
    "hybrid-gpt-oss-host": _HYBRID + ["--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--kv-tokens", "30000",
                                      "--cpu-offload-gib", "8"],
    "hybrid-gpt-oss-swap-host": _SESSIONS + ["--model", "gpt-oss-20b", "--gpu", "h200", "--rate", "20",
                                             "--kv-tokens", "4000", "--cpu-offload-gib", "1", "--preemption", "swap"],
    "closed-loop": ["{closed.csv}", *_LLAMA, "--kv-tokens", "40000"],
    "closed-loop-fleet": ["{closed.csv}", *_LLAMA, "--kv-tokens", "20000", "--replicas", "3", "--router",
                          "least-requests"],
    "sessions-fleet": ["{sessions.csv}", *_LLAMA, "--allocator", "radix", "--replicas", "3", "--router",
                       "prefix-aware"],
}


def _digest(out: Path, dropped: frozenset[str] = frozenset(), columns: frozenset[str] = frozenset()) -> str:
    """sha256 over every file under ``out`` (sorted by name); JSON files without ``wall_time_s`` and ``dropped``,
    CSV tables without ``columns``."""
    h = hashlib.sha256()
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix == ".json":
            doc = json.loads(data)
            _drop_keys(doc, dropped | {"wall_time_s"})
            data = json.dumps(doc, sort_keys=True).encode()
        elif path.suffix == ".csv" and columns:
            data = _drop_columns(data, columns)
        h.update(path.relative_to(out).as_posix().encode() + b"\0" + data)
    return h.hexdigest()


def _drop_columns(data: bytes, columns: frozenset[str]) -> bytes:
    """A CSV table's bytes without ``columns`` (those it has), written back as `csv` writes rows."""
    rows = list(csv.reader(io.StringIO(data.decode())))
    if not rows:
        return data
    keep = [i for i, name in enumerate(rows[0]) if name not in columns]
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([row[i] for i in keep] for row in rows)
    return text.getvalue().encode()


def _drop_keys(doc: object, keys: frozenset[str]) -> None:
    if isinstance(doc, dict):
        for key in keys:
            doc.pop(key, None)
        for value in doc.values():
            _drop_keys(value, keys)
    elif isinstance(doc, list):
        for value in doc:
            _drop_keys(value, keys)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the configurations whose name contains this")
    parser.add_argument("--list", action="store_true", help="name the configurations and stop")
    parser.add_argument("--drop-key", action="append", default=[], help="leave this JSON key out (repeatable)")
    parser.add_argument("--drop-column", action="append", default=[],
                        help="leave this column of the CSV tables out (repeatable)")
    parser.add_argument("--keep", type=Path, help="keep each run's files in KEEP/NAME")
    args = parser.parse_args()
    names = [n for n in CONFIGS if args.only in n]
    if args.list:
        print("\n".join(f"{n}: kvsim run {' '.join(CONFIGS[n])}" for n in names))
        return 0
    env = {k: v for k, v in os.environ.items() if k != "KVSIM_TRACES"}  # the shipped samples, always
    for name in names:
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as traces:
            run_args = []  # run where the traces are, which are named relatively: the outputs name them
            for arg in CONFIGS[name]:
                if arg.startswith("{"):
                    arg = arg.strip("{}")
                    subprocess.run([sys.executable, "-m", "sim.cli", "trace", "generate", *TRACES[arg], "--out",
                                    arg], check=True, capture_output=True, env=env, cwd=traces)
                run_args.append(arg)
            cmd = [sys.executable, "-m", "sim.cli", "run", *run_args, "--out", tmp, "--format", "csv"]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=traces)
            if done.returncode:
                print(f"{name}: FAILED ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
                continue
            print(f"{name}: {_digest(Path(tmp), frozenset(args.drop_key), frozenset(args.drop_column))}", flush=True)
            if args.keep is not None:
                shutil.copytree(tmp, args.keep / name, dirs_exist_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
