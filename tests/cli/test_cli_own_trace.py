"""Second user pass: reading one's own CSV with ``kvsim run FILE --columns ...``.

The unknown-format error told ``kvsim run`` users to pass ``--format`` (on ``kvsim run`` that flag picks the
output table format; the trace's is ``--trace-format``), and a CSV read through a column mapping was described
in every result as "read as Azure LLM inference trace 2023 CSV", as if it were Microsoft's trace.
"""

from __future__ import annotations

import pytest

import workloads
from workloads.presets import SAMPLES_DIR


@pytest.fixture
def own_csv(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("t,inp,outp\n0.0,100,50\n1.5,300,40\n")
    return path


def test_unknown_format_error_names_the_trace_format_flag(own_csv):
    with pytest.raises(workloads.TraceError, match="--trace-format"):
        workloads.load_trace(own_csv)


def test_column_mapping_is_named_in_the_source(own_csv):
    workload = workloads.load_trace(own_csv, columns="arrival_time_s=t,prompt_tokens=inp,output_tokens=outp")
    assert len(workload) == 2
    assert "Azure LLM inference trace" not in workload.source
    assert "arrival_time_s=t" in workload.source


def test_known_trace_keeps_its_label_and_attribution():

    path = SAMPLES_DIR / "AzureLLMInferenceTrace_conv.csv"
    workload = workloads.load_trace(path)
    assert "read as Azure LLM inference trace 2023 CSV" in workload.source
    assert "CC-BY-4.0" in workload.source
