"""How a mixture of experts' routed experts are spread over the GPUs of a data-parallel deployment, and so what
each GPU holds of the weights (and has left for KV).

vLLM 0.33 (``model_executor/layers/fused_moe/config.py``, ``FusedMoEParallelConfig.make`` and
``flatten_tp_across_dp_and_pcp``) builds every routed-expert (``FusedMoE``) layer over one group of
``data_parallel_size x tensor_parallel_size`` GPUs, whatever ``--enable-expert-parallel`` says ("There are actually
dp_size * pcp_size * tp_size devices. Update tp_size and tp_rank so we shard across all devices"; its docs,
"Data Parallel Deployment": "By default, expert layers form a tensor parallel group of size DP x TP"):

* without expert parallelism each GPU holds ``1 / (DP x TP)`` of every expert (its ``intermediate_size_per_partition
  = intermediate_size // tp_size`` with the flattened ``tp_size``);
* with it (``ep_size`` = that flattened size) each GPU holds whole experts, ``E // ep_size`` of them and one more on
  the first ``E % ep_size`` ranks (``expert_map_manager.determine_expert_map``: "Distribute experts as evenly as
  possible"). kvsim sizes every rank's pool by the fullest GPU's, ``ceil(E / ep_size)`` experts.

Everything else (attention, the dense and shared-expert MLPs, embedding and LM head, the replicated layers) is each
data-parallel rank's own, split over its ``tensor_parallel`` GPUs as without data parallelism
(`ModelSpec.weight_bytes_per_gpu`). So data parallelism alone already divides the routed experts by DP x TP;
expert parallelism changes how they are cut (whole experts: the same bytes when ``E`` divides evenly) and is
refused on a dense model, which has no routed experts to place.
"""

from __future__ import annotations

import math

from allocators.catalog import ModelSpec, per_gpu_share


def check_expert_parallel(model: ModelSpec, expert_parallel: bool) -> None:
    """A one-line ValueError for ``--enable-expert-parallel`` on a model without routed experts."""
    if expert_parallel and not model.num_experts:
        raise ValueError(f"--enable-expert-parallel places routed experts on GPUs, and {model.name} is a dense model "
                         "with none (no num_experts in its catalog entry); leave it out")


def routed_divisor(model: ModelSpec, tensor_parallel: int, data_parallel: int = 1,
                   expert_parallel: bool = False) -> float:
    """What the routed experts' bytes are divided by on the fullest GPU: the MoE group's ``data_parallel x
    tensor_parallel`` GPUs, or with ``expert_parallel`` ``E / ceil(E / group)`` (whole experts, the first ranks one
    more when the group does not divide ``E``). Exactly the group size whenever it divides ``E``."""
    group = tensor_parallel * data_parallel
    if not expert_parallel or model.num_experts % group == 0:
        return float(group)
    return model.num_experts / math.ceil(model.num_experts / group)


def weight_bytes_per_gpu(model: ModelSpec, tensor_parallel: int = 1, data_parallel: int = 1,
                         expert_parallel: bool = False) -> float:
    """What each GPU of a ``data_parallel`` x ``tensor_parallel`` deployment holds of the weights: its rank's
    share of everything but the routed experts (`ModelSpec.weight_bytes_per_gpu`) and its share of the routed
    experts over the whole MoE group (`routed_divisor`). Exactly `ModelSpec.weight_bytes_per_gpu` for a dense model
    or where the group is the tensor-parallel one (one rank, experts dividing evenly)."""
    divisor = routed_divisor(model, tensor_parallel, data_parallel, expert_parallel)
    if not model.num_experts or divisor == tensor_parallel:
        return model.weight_bytes_per_gpu(tensor_parallel)
    routed = model.routed_expert_bytes
    rest = per_gpu_share(model.weight_bytes - routed, model.replicated_weight_bytes, tensor_parallel)
    return rest + routed / divisor
