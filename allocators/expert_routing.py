"""How much of a mixture of experts' routed weights one step reads: the expected share of experts its tokens
touch.

A step of ``T`` tokens (decode and prefill together) runs each MoE layer's experts for the tokens routed to
them, and a grouped MoE kernel (vLLM's fused_moe) loads an expert's weights once for all its tokens and not at
all when none is routed to it. With ``E`` routed experts and ``k`` picked per token, and routing uniform and
independent between tokens, a token leaves a given expert out with probability ``1 - k / E`` (its ``k``
picks are distinct, so each expert is one of them with probability ``k / E``), all ``T`` tokens do with
``(1 - k / E) ^ T``, so the expected number of distinct experts a layer touches is::

    E x (1 - (1 - k / E) ^ T)

(linearity of expectation over the ``E`` experts). Every MoE layer has the same ``E``, ``k`` and ``T``, so the
same share of the routed bytes is read in every layer. At ``T = 1`` it is ``k / E`` (gpt-oss-20b: 4 / 32;
DeepSeek-V3: 8 / 256), and it tends to 1 as ``T`` grows (DeepSeek-V3: 61% at 30 tokens).

Uniform routing is an upper bound on the distinct experts of independent tokens: for experts picked with
probabilities ``p_i`` summing to ``k``, the expected count ``sum 1 - (1 - p_i) ^ T`` is concave in the
``p_i``, so by Jensen it is largest when they are all ``k / E``. Real routers are skewed (and tokens of one
request correlated), so a real step reads at most this much, often less; the charge errs on the slow side.
"""

from __future__ import annotations


def distinct_expert_fraction(num_experts: int, num_experts_per_tok: int, tokens: int) -> float:
    """The expected share of ``num_experts`` routed experts that ``tokens`` tokens, each routed uniformly to
    ``num_experts_per_tok`` of them, touch in one layer: ``1 - (1 - k / E) ^ T`` (0 for no tokens)."""
    if tokens <= 0:
        return 0.0
    return 1.0 - (1.0 - num_experts_per_tok / num_experts) ** tokens
