"""Our measurements against the paper's values: one `Check` per number, with the tolerance and pass or miss.

Every check names its tolerance up front (from `sim.reproduce.paper`) and says by how much a miss misses, so
the report is honest in both directions: a check passes or it does not; nothing is adjusted to fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import pandas as pd

from sim.reproduce import paper


@dataclass(frozen=True, slots=True)
class Check:
    """One comparison. ``unit`` says how to read the numbers: share or fine_share (0-1), count (a mean), int,
    ratio, slots, tokens or flag.
    When the paper gives a range, ``paper`` is its low end and ``paper_high`` its high end."""

    experiment: str
    metric: str
    ours: float
    paper: float | None
    target: str
    passed: bool | None
    unit: str = "share"
    paper_high: float | None = None

    @property
    def miss_by(self) -> str:
        """The signed difference, in the unit a reader compares by (points, percent, times); for a range, the
        distance to its nearer end (empty inside it)."""
        if self.paper is None or not math.isfinite(self.ours):
            return ""
        if self.paper_high is not None:
            if self.paper <= self.ours <= self.paper_high:
                return ""
            nearer = self.paper if self.ours < self.paper else self.paper_high
            return f"{(self.ours - nearer) * 100:+.1f} pts" if self.unit == "share" else f"{self.ours - nearer:+.2f}x"
        if self.unit == "share":
            return f"{(self.ours - self.paper) * 100:+.1f} pts"
        if self.unit == "fine_share":
            return f"{(self.ours - self.paper) * 100:+.2f} pts"
        if self.unit == "flag":
            return ""
        if self.unit in ("int", "tokens"):
            return f"{self.ours - self.paper:+.0f}"
        if self.unit in ("count", "slots") and self.paper:
            return f"{(self.ours / self.paper - 1) * 100:+.1f}%"
        return f"{self.ours - self.paper:+.2f}"

    def as_row(self) -> dict:
        return {**asdict(self), "miss_by": self.miss_by}


def within_points(ours: float, theirs: float, points: float) -> bool:
    return abs(ours - theirs) <= points + 1e-12


def capacity_checks(slots: int, max_fit: int, unusable_frac: float) -> list[Check]:
    """Section 3's capacity arithmetic, which must hold exactly."""
    return [
        Check("capacity", "KV token slots (12 GiB / 800 KiB)", slots, paper.CAPACITY_SLOTS, "exact",
              slots == paper.CAPACITY_SLOTS, "slots"),
        Check("capacity", "Orca (Max) requests that fit", max_fit, paper.MAX_REQUESTS_FIT, "exact",
              max_fit == paper.MAX_REQUESTS_FIT, "int"),
        Check("capacity", "Orca (Max) unusable share", unusable_frac, paper.MAX_UNUSABLE_FRAC, "exact (to 0.01%)",
              round(unusable_frac * 100, 2) == round(paper.MAX_UNUSABLE_FRAC * 100, 2), "fine_share"),
    ]


def our_fig2_shares(summary: Mapping[str, float]) -> dict[str, float]:
    """A summary's five shares folded into the paper's Fig. 2 categories."""
    external_and_free = summary["external_frag_frac"] + summary["free_frac"]
    in_use = 1.0 - summary["free_frac"]
    token_states_in_use = summary["token_states_frac"] / in_use if in_use > 0 else math.nan
    return {
        "token_states_in_use": token_states_in_use,
        "waste_in_use": 1.0 - token_states_in_use,
        "token_states": summary["token_states_frac"],
        "reservation": summary["reservation_frac"],
        "internal_frag": summary["internal_frag_frac"],
        "external_and_free": external_and_free,
        "waste_together": summary["internal_frag_frac"] + external_and_free,
    }


def breakdown_checks(summaries: Mapping[str, Mapping[str, float]]) -> list[Check]:
    """Fig. 2: every share the paper gives, within `paper.FIG2_TOLERANCE`, plus the in-use reading of vLLM's bar
    (`paper.FIG2_IN_USE`) as separate rows."""
    checks = []
    target = f"within {paper.FIG2_TOLERANCE * 100:.0f} pts"
    for name, shares in [*paper.FIG2_SHARES.items(), *paper.FIG2_IN_USE.items()]:
        if name not in summaries:
            continue
        ours = our_fig2_shares(summaries[name])
        for key, theirs in shares.items():
            label = f"{paper.PAPER_NAMES[name]} {key.replace('_in_use', ' (of memory in use)').replace('_', ' ')}"
            checks.append(Check("fig2", label, ours[key], theirs, target,
                                within_points(ours[key], theirs, paper.FIG2_TOLERANCE)))
    return checks


def batch_checks(summaries: Mapping[str, Mapping[str, float]]) -> list[Check]:
    """Fig. 13: mean batch sizes within `paper.FIG13_TOLERANCE`, and their order Max < Pow2 < Oracle < paged."""
    checks = []
    target = f"within {paper.FIG13_TOLERANCE:.0%}"
    for name, theirs in paper.FIG13_BATCH.items():
        if name in summaries:
            ours = float(summaries[name]["mean_running"])
            checks.append(Check("fig13", f"{paper.PAPER_NAMES[name]} mean batch", ours, theirs, target,
                                abs(ours / theirs - 1) <= paper.FIG13_TOLERANCE + 1e-12, "count"))
    present = [n for n in paper.BATCH_ORDER if n in summaries]
    if len(present) == len(paper.BATCH_ORDER):
        values = [float(summaries[n]["mean_running"]) for n in present]
        in_order = all(a < b for a, b in zip(values, values[1:], strict=False))
        checks.append(Check("fig13", "order Max < Pow2 < Oracle < vLLM", float(in_order), 1.0, "holds", in_order,
                            "flag"))
    return checks


def sharing_checks(sharing: pd.DataFrame) -> list[Check]:
    """Section 6.3: each width's memory saved by sharing inside the paper's range for its workload and mode
    (`paper.SHARING_SAVED`, the range over widths 2-6)."""
    checks = []
    for r in sharing.itertuples():
        low, high = paper.SHARING_SAVED[(r.workload, r.mode)]
        saved = float(r.shared_saved_frac)
        checks.append(Check("sharing", f"{r.workload} {r.mode} x{r.width}: memory saved", saved, low,
                            f"{low:.1%}-{high:.1%} (x2-x6)", low <= saved <= high, "share", paper_high=high))
    return checks


def sustained_checks(rates: Mapping[str, float], model: str = paper.MODEL) -> list[Check]:
    """Section 6.2: paged's sustained rate over each baseline's, inside the paper's range (which covers all three
    model sizes, so each size is checked against it; OPT-13B's rows carry no model name)."""
    checks = []
    where = "" if model == paper.MODEL else f"{model.upper()}: "
    for name, (low, high) in paper.SUSTAINED_RATIO.items():
        if "paged" not in rates or name not in rates:
            continue
        ratio = rates["paged"] / rates[name] if rates[name] > 0 else math.nan
        ok = math.isfinite(ratio) and low <= ratio <= high
        checks.append(Check("sustained", f"{where}vLLM / {paper.PAPER_NAMES[name]} sustained rate", ratio,
                            low, f"{low}x-{high}x", ok, "ratio", paper_high=high))
    return checks


def block_size_checks(results: pd.DataFrame, metric: str = "normalized_latency_s_per_tok") -> list[Check]:
    """Section 7.2: the block size with the lowest normalized latency lies in the paper's best range."""
    checks = []
    for workload, best in paper.BEST_BLOCK_SIZES.items():
        rows = results[results["workload"] == workload]
        if rows.empty:
            continue
        ours = int(rows.loc[rows[metric].idxmin(), "block_size"])
        checks.append(Check("block-size", f"{workload}: best block size", ours, None,
                            f"in {{{', '.join(map(str, best))}}}", ours in best, "tokens"))
    return checks


def preemption_checks(results: pd.DataFrame, metric: str = "normalized_latency_s_per_tok") -> list[Check]:
    """Section 7.4 / Fig. 19 (b): swapping's normalized latency over recomputation's is above 1 at the smallest
    block size swept, and within `paper.SWAP_COMPARABLE_TOLERANCE` of 1 at every block size of 16-64 swept (the
    one farthest from 1 is shown)."""
    if results.empty:
        return []
    latency = results.pivot(index="block_size", columns="preemption", values=metric).sort_index()
    ratio = latency["swap"] / latency["recompute"]
    smallest = int(ratio.index[0])
    checks = [Check("preemption", f"swap / recompute latency at block size {smallest}", float(ratio.iloc[0]), None,
                    "> 1 (swap poor at small blocks)", bool(ratio.iloc[0] > 1), "ratio")]
    medium = ratio[ratio.index.isin(paper.SWAP_COMPARABLE_BLOCK_SIZES)]
    if len(medium):
        worst = float(medium.iloc[(medium - 1).abs().argmax()])
        sizes = "-".join(str(int(b)) for b in (medium.index[0], medium.index[-1]))
        tolerance = paper.SWAP_COMPARABLE_TOLERANCE
        checks.append(Check("preemption", f"swap / recompute latency at block sizes {sizes}, farthest from 1", worst,
                            None, f"within {tolerance:.0%} of 1 (comparable)", abs(worst - 1) <= tolerance, "ratio"))
    return checks


def checks_frame(checks: list[Check]) -> pd.DataFrame:
    return pd.DataFrame([c.as_row() for c in checks])
