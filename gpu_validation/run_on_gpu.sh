#!/usr/bin/env bash
# Run every GPU check and a quick Llama-3-8B calibration, writing CSVs and the table into DIR.
# Usage: gpu_validation/run_on_gpu.sh DIR [--device cpu] [--quick] [--no-compile-flex] [--budget-s 360]
# Needs a python with torch, numpy and pandas (and triton for the Triton kernel); kvsim need not be installed.
# The interpreter is $PYTHON if set (e.g. PYTHON=.venv/bin/python for a venv that is not activated), else python3.
# Within --budget-s seconds (a watchdog ends it 60 s later at most); exits 1 unless everything ran and passed.
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 DIR [run_all options]" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" -m gpu_validation.run_all "$@"
