"""`KVGroupFixture`: a stand-in for the catalog's `KVGroup`, shared by the hybrid allocator's tests."""

from dataclasses import dataclass


@dataclass(frozen=True)
class KVGroupFixture:
    """The fields of the catalog's `KVGroup` the hybrid allocator reads."""

    name: str
    attention: str
    layers: int
    window: int | None
    bytes_per_token: int
