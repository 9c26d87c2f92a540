"""Regressions found by feeding `kvsim trace` real and broken traces."""

import pandas as pd
from click.testing import CliRunner

from sim.cli import main
from workloads import load_trace


def _invoke(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_bad_value_is_shown_as_the_user_wrote_it(tmp_path):
    # The error said "(got np.float64(0.0))" for an input_length of 0: a numpy repr, not the file's value.
    path = tmp_path / "zero.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 0, "output_length": 10, "hash_ids": []}\n')
    result = _invoke(["trace", "stats", path])
    assert result.exit_code == 2
    assert "(got 0)" in result.output and "np." not in result.output
    path = tmp_path / "half.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:05.0,100.5,10\n")
    result = _invoke(["trace", "stats", path])
    assert result.exit_code == 2 and "(got 100.5)" in result.output and "np." not in result.output


def test_generate_preset_honours_n_and_beam_width(tmp_path):
    # `kvsim trace generate --preset sharegpt-paper --n 4` wrote a file with no `n` column: the flag was
    # silently dropped, and every "parallel sampling" experiment built on it ran plain requests.
    out = tmp_path / "par.jsonl"
    result = _invoke(["trace", "generate", "--preset", "sharegpt-paper", "--num-requests", 20, "--n", 4, "--out", out])
    assert result.exit_code == 0, result.output
    assert set(load_trace(out).n) == {4}
    out = tmp_path / "beam.csv"
    result = _invoke(["trace", "generate", "--preset", "alpaca-paper", "--num-requests", 20, "--beam-width", 4,
                      "--out", out])
    assert result.exit_code == 0, result.output
    assert set(pd.read_csv(out).beam_width) == {4}


def test_generate_preset_refuses_options_it_cannot_apply(tmp_path):
    for extra in (["--turns", 3], ["--system-prompt-len", 100, "--system-prompt-frac", 0.5],
                  ["--n", 2, "--beam-width", 2]):
        result = _invoke(["trace", "generate", "--preset", "sharegpt-paper", "--num-requests", 5, *extra,
                          "--out", tmp_path / "x.csv"])
        assert result.exit_code == 2, (extra, result.output)
        assert "Traceback" not in result.output
