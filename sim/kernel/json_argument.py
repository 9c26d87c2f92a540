"""The JSON object an engine argument such as ``--speculative-config`` or ``--kv-transfer-config`` takes (vLLM
parses both into a config dataclass from a JSON object), read once for every such flag so that each refuses
text that is not one with the same words."""

from __future__ import annotations

import json


def json_object(flag: str, text: str) -> dict:
    """``text`` parsed as a JSON object; a ValueError naming ``flag`` (and the parser's complaint) otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} must be a JSON object, got {text!r}: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text!r}")
    return value
