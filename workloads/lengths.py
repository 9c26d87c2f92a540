"""Length distributions: how many prompt and output tokens each request has.

Spec grammar (``--lengths``); every kind also takes ``max_total=T``, a cap on prompt + output (the paper's
2048 for OPT): the prompt is cut to T-1 and the output to T minus the prompt, as a model's maximum length
would. Samples are rounded to whole tokens, at least 1 and at most `MAX_TOKENS` (10^9, what a trace row may
hold), and every token count or mean a spec gives must be within that too.

- ``fixed:prompt=P,output=O``
- ``uniform:prompt_min=a,prompt_max=b,output_min=c,output_max=d`` (inclusive bounds)
- ``lognormal:prompt_mean=m,prompt_cv=c,output_mean=m,output_cv=c``: mean and coefficient of variation of
  the underlying lognormal, *before* rounding and the cap (the paper presets solve for these so that the means
  *after* the cap match the paper's)
- ``zipf:prompt_s=s,prompt_max=M,output_s=s,output_max=M``: P(k) proportional to k^-s on 1..M
- ``empirical:trace=FILE``: (prompt, output) pairs resampled jointly, with replacement, from a trace file or
  preset name (`workloads.named` resolves the name into the `Empirical.workload` it samples)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workloads.specs import check_cv, check_positive, check_tokens
from workloads.validation import MAX_TOKENS
from workloads.workload import Workload

Lengths = tuple[np.ndarray, np.ndarray]


def apply_cap(prompt: np.ndarray, output: np.ndarray, max_total: int | None) -> Lengths:
    """Round to whole tokens in [1, `MAX_TOKENS`] (a lognormal's tail may pass it, and a float past int64 would
    wrap negative) and cap prompt + output at ``max_total``."""
    prompt = np.clip(np.rint(prompt), 1, MAX_TOKENS).astype(np.int64)
    output = np.clip(np.rint(output), 1, MAX_TOKENS).astype(np.int64)
    if max_total is not None:
        np.minimum(prompt, max_total - 1, out=prompt)
        np.minimum(output, max_total - prompt, out=output)
    return prompt, output


def _check_cap(max_total: int | None) -> None:
    if max_total is not None and not 2 <= max_total <= MAX_TOKENS:
        raise ValueError(f"max_total must be >= 2 and <= {MAX_TOKENS:g}, got {max_total}")


@dataclass(frozen=True)
class Fixed:
    prompt: int
    output: int
    max_total: int | None = None

    def __post_init__(self) -> None:
        check_tokens(prompt=self.prompt, output=self.output)
        _check_cap(self.max_total)

    def sample(self, rng: np.random.Generator, count: int) -> Lengths:
        return apply_cap(np.full(count, self.prompt), np.full(count, self.output), self.max_total)


@dataclass(frozen=True)
class Uniform:
    prompt_min: int
    prompt_max: int
    output_min: int
    output_max: int
    max_total: int | None = None

    def __post_init__(self) -> None:
        check_tokens(prompt_min=self.prompt_min, prompt_max=self.prompt_max, output_min=self.output_min,
                     output_max=self.output_max)
        for kind in ("prompt", "output"):
            low, high = getattr(self, f"{kind}_min"), getattr(self, f"{kind}_max")
            if high < low:
                raise ValueError(f"{kind}_max={high} must be >= {kind}_min={low}")
        _check_cap(self.max_total)

    def sample(self, rng: np.random.Generator, count: int) -> Lengths:
        prompt = rng.integers(self.prompt_min, self.prompt_max, count, endpoint=True)
        output = rng.integers(self.output_min, self.output_max, count, endpoint=True)
        return apply_cap(prompt, output, self.max_total)


def lognormal_params(mean: float, cv: float) -> tuple[float, float]:
    """(mu, sigma) of the normal underlying a lognormal with this mean and coefficient of variation."""
    sigma = float(np.sqrt(np.log1p(cv**2)))
    return float(np.log(mean) - sigma**2 / 2), sigma


@dataclass(frozen=True)
class Lognormal:
    prompt_mean: float
    prompt_cv: float
    output_mean: float
    output_cv: float
    max_total: int | None = None

    def __post_init__(self) -> None:
        check_tokens(prompt_mean=self.prompt_mean, output_mean=self.output_mean)
        check_cv(prompt_cv=self.prompt_cv, output_cv=self.output_cv)
        _check_cap(self.max_total)

    def sample(self, rng: np.random.Generator, count: int) -> Lengths:
        prompt = rng.lognormal(*lognormal_params(self.prompt_mean, self.prompt_cv), count)
        output = rng.lognormal(*lognormal_params(self.output_mean, self.output_cv), count)
        return apply_cap(prompt, output, self.max_total)


def _zipf_draw(rng: np.random.Generator, s: float, top: int, count: int) -> np.ndarray:
    """``count`` draws of P(k) proportional to k^-s on 1..top, by inverse CDF. The normalised CDF ends at
    exactly 1.0 and every uniform draw is below it, so no draw exceeds ``top``."""
    cdf = np.cumsum(np.arange(1, top + 1, dtype=np.float64) ** -s)
    return np.searchsorted(cdf / cdf[-1], rng.random(count), side="right") + 1


@dataclass(frozen=True)
class Zipf:
    """Bounded Zipf (a finite support, so any exponent s > 0 is valid), sampled by inverse CDF."""

    prompt_s: float
    prompt_max: int
    output_s: float
    output_max: int
    max_total: int | None = None

    def __post_init__(self) -> None:
        check_positive(prompt_s=self.prompt_s, prompt_max=self.prompt_max,
                       output_s=self.output_s, output_max=self.output_max)
        if max(self.prompt_max, self.output_max) > 10**7:
            raise ValueError("prompt_max and output_max must be <= 10^7")
        _check_cap(self.max_total)

    def sample(self, rng: np.random.Generator, count: int) -> Lengths:
        prompt = _zipf_draw(rng, self.prompt_s, self.prompt_max, count)
        output = _zipf_draw(rng, self.output_s, self.output_max, count)
        return apply_cap(prompt, output, self.max_total)


@dataclass(frozen=True)
class Empirical:
    """Resample (prompt, output) pairs jointly from a trace, keeping their correlation. ``workload`` is the
    data; ``trace`` only names where it came from."""

    workload: Workload = field(repr=False, compare=False)
    trace: str | None = None
    max_total: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.workload, Workload) or len(self.workload) == 0:
            raise ValueError("empirical lengths need a non-empty workload to resample (trace=FILE)")
        _check_cap(self.max_total)

    def sample(self, rng: np.random.Generator, count: int) -> Lengths:
        pick = rng.integers(0, len(self.workload), count)
        return apply_cap(self.workload.prompt_tokens[pick], self.workload.output_tokens[pick], self.max_total)


LengthDistribution = Fixed | Uniform | Lognormal | Zipf | Empirical

KINDS = {"fixed": Fixed, "uniform": Uniform, "lognormal": Lognormal, "zipf": Zipf, "empirical": Empirical}
TYPES = {"prompt": int, "output": int, "prompt_min": int, "prompt_max": int, "output_min": int,
         "output_max": int, "prompt_mean": float, "prompt_cv": float, "output_mean": float,
         "output_cv": float, "prompt_s": float, "output_s": float, "max_total": int, "trace": str}
