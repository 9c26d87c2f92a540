"""Attribution lines of the shared real traces, keyed by file name, to print with any result built on them.

The text is exactly the "Attribution" line of each file in the shared traces' README (and in
``workloads/data/traces/README.md``): the licences (CC-BY-4.0 for Azure) require it to travel with the data.
"""

from __future__ import annotations

_AZURE = ("Azure LLM inference trace 2023, Microsoft Azure (Azure/AzurePublicDataset), CC-BY-4.0. Cite: Pratyush "
          "Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed Maleki, Ricardo Bianchini. "
          '"Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024.')
ATTRIBUTIONS: dict[str, str] = {
    "AzureLLMInferenceTrace_code.csv": _AZURE,
    "AzureLLMInferenceTrace_conv.csv": _AZURE,
    "conversation_trace.jsonl": (
        "Mooncake FAST'25 conversation trace, kvcache-ai/Mooncake (Apache-2.0). Cite: Ruoyu Qin, Zheming Li, "
        "Weiran He, Jialei Cui, Feng Ren, Mingxing Zhang, Yongwei Wu, Weimin Zheng, Xinran Xu. \"Mooncake: "
        "Trading More Storage for Less Computation — A KVCache-centric Architecture for Serving LLM Chatbot\", "
        "USENIX FAST 2025."),
    "sharegpt_8k_filtered_stats_llama2_tokenizer.csv": (
        "per-request token statistics of the ShareGPT conversation dataset, tokenized with the Llama-2 "
        "tokenizer, from project-etalon/etalon (Apache-2.0). Cite: Amey Agrawal et al., \"etalon: Holistic "
        "Performance Evaluation Framework for LLM Inference Systems\", arXiv:2407.07000, 2024."),
}
