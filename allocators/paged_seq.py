"""One sequence's record in a paged allocator: its block table and the facts of its last block that keep
`grow`'s hot path to a few integer updates."""

from __future__ import annotations


class SeqBlocks:
    """One sequence: its block table, tokens, final length, and the two cached facts of its last block
    (``room``: slots writable without allocator work; ``res``: slots it will still fill there)."""

    __slots__ = ("table", "tokens", "final", "room", "res", "hashes", "num_hashed", "own_from", "shared_to")

    def __init__(self, table: list[int], tokens: int, final: int, hashes: tuple[int, ...] = (),
                 own_from: int | None = None) -> None:
        self.table, self.tokens, self.final = table, tokens, final
        self.room = self.res = 0
        self.hashes = hashes
        self.num_hashed = 0  # leading blocks whose hash has been settled (cached, hit or skipped)
        self.own_from = len(hashes) if own_from is None else own_from  # hashes from here on: the request's own
        # (parked); ``shared_to``: hashes before it other requests may carry (`PagedQueries.shared_fill`)
        self.shared_to = self.own_from
