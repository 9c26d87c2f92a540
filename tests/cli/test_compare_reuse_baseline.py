"""`kvsim compare --reuse-baseline` adds an ALLOCATOR-no-reuse run only where the allocator's prefix cache hit
something; where it gets none (prefix caching off, nothing hit), a note says so, where the column used to be
left out without a word and read as if the flag had not been given."""

import json

from click.testing import CliRunner

from sim.cli import main


def _trace(tmp_path) -> str:
    path = tmp_path / "shared.csv"
    result = CliRunner().invoke(main, ["trace", "generate", "--lengths", "fixed:prompt=300,output=20", "--arrivals",
                                       "poisson:rate=4", "--num-requests", "24", "--system-prompt-len", "256",
                                       "--system-prompt-frac", "1", "--out", str(path)])
    assert result.exit_code == 0, result.output
    return str(path)


def _compare(tmp_path, *extra):
    return CliRunner().invoke(main, ["compare", _trace(tmp_path), "--model", "llama-3-8b", "--gpu", "a100-80gb",
                                     "--kv-tokens", "20000", "--reuse-baseline", "--json", *extra])


def test_an_allocator_without_hits_gets_a_note_not_a_silent_gap(tmp_path):
    result = _compare(tmp_path, "--allocator", "paged,contiguous-max")
    assert result.exit_code == 0, result.output
    runs = [s.get("run", s["allocator"]) for s in json.loads(result.stdout)]
    assert runs == ["paged", "paged-no-reuse", "contiguous-max"]
    assert result.stderr.count("Note: --reuse-baseline") == 1
    assert ("Note: --reuse-baseline: no run without reuse for contiguous-max: it reused no cached prompt token "
            "(cached_prompt_tokens 0), so contiguous-max-no-reuse would repeat its run") in result.stderr


def test_prefix_caching_off_gets_a_note(tmp_path):
    result = _compare(tmp_path, "--allocator", "paged", "--no-prefix-caching")
    assert result.exit_code == 0, result.output
    assert [s["allocator"] for s in json.loads(result.stdout)] == ["paged"]
    assert ("Note: --reuse-baseline: no run without reuse for paged: prefix caching is off (--no-prefix-caching)"
            in result.stderr)


def test_no_note_without_the_flag(tmp_path):
    result = CliRunner().invoke(main, ["compare", _trace(tmp_path), "--model", "llama-3-8b", "--gpu", "a100-80gb",
                                       "--kv-tokens", "20000", "--allocator", "contiguous-max", "--json"])
    assert result.exit_code == 0, result.output
    assert "--reuse-baseline" not in result.stderr
