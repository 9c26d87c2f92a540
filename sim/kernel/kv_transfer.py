"""vLLM's ``--kv-transfer-config`` as kvsim reads it for a P/D fleet (`sim.kernel.disaggregation`): the
connector and roles modelled and the link's default, apart from the fleet so that `SimConfig` checks a
configuration without importing the simulation."""

from __future__ import annotations

from sim.kernel.json_argument import json_object

KV_CONNECTORS = ("NixlConnector",)
"""The connectors of ``--kv-transfer-config`` kvsim models."""
KV_ROLES = ("kv_both", "kv_producer", "kv_consumer")
"""vLLM's ``KVTransferConfig.kv_role`` values (NixlConnector's docs deploy both sides as ``kv_both``)."""
DEFAULT_KV_TRANSFER_GB_S = 50.0
"""One 400 Gb/s NIC per GPU (NVIDIA's DGX H100: eight ConnectX-7 400 Gb/s InfiniBand ports for eight GPUs, its
user guide's hardware overview) = 50 GB/s a GPU, before protocol overhead."""


def parse_kv_transfer_config(text: str) -> dict:
    """vLLM's ``--kv-transfer-config`` JSON: kvsim reads ``kv_connector`` (NixlConnector) and ``kv_role``, and
    refuses keys that would change what it models, naming them."""
    value = json_object("--kv-transfer-config", text)
    connector = value.get("kv_connector")
    if connector not in KV_CONNECTORS:
        raise ValueError(f"--kv-transfer-config: kv_connector {connector!r} is not modelled; kvsim models "
                         f"{', '.join(KV_CONNECTORS)}")
    role = value.get("kv_role", "kv_both")
    if role not in KV_ROLES:
        raise ValueError(f"--kv-transfer-config: kv_role must be one of {', '.join(KV_ROLES)}, got {role!r}")
    unknown = sorted(set(value) - {"kv_connector", "kv_role", "kv_buffer_device"})
    if unknown:
        raise ValueError(f"--kv-transfer-config: {', '.join(unknown)} not modelled (kvsim reads kv_connector and "
                         "kv_role)")
    if value.get("kv_buffer_device", "cuda") != "cuda":
        raise ValueError("--kv-transfer-config: kv_buffer_device other than cuda (a host staging buffer) is not "
                         "modelled")
    return value
