"""Where a contiguous slab goes in the linear KV arena: buddy, first-fit or best-fit placement.

The paper's Orca baselines address their slabs with a buddy allocator, so ``buddy`` is the default and its
rounding of every slab up to a power of two is charged as allocator overhead (external fragmentation).
``first-fit`` and ``best-fit`` place slabs at their exact size; the waste they cause is holes between slabs,
which only count against the policy while a request waits that none of the holes can take.

A placement knows offsets and sizes only, never sequences: `place` returns ``(offset, physical_size)`` or
None, `release` takes the offset back. All choices are deterministic (lowest address wins ties).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left, insort


class Placement(ABC):
    """Free-space management of an arena of ``capacity`` slots."""

    name = ""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.free_slots = capacity
        self._placed: dict[int, int] = {}  # offset -> physical size

    @property
    def placed(self) -> dict[int, int]:
        """Placed slabs, offset -> physical size (read-only view for invariant checks)."""
        return dict(self._placed)

    def physical_size(self, size: int) -> int:
        """Slots a slab of ``size`` really occupies under this placement."""
        return size

    @property
    def largest_possible(self) -> int:
        """The largest physical slab that fits into the empty arena."""
        return self.capacity

    @abstractmethod
    def place(self, size: int) -> tuple[int, int] | None:
        """Find room for a slab of ``size`` slots: ``(offset, physical_size)``, or None (nothing changed)."""

    @abstractmethod
    def release(self, offset: int) -> int:
        """Give back the slab at ``offset``; returns its physical size."""

    @abstractmethod
    def free_extents(self) -> list[tuple[int, int]]:
        """Free ``(offset, size)`` extents in address order."""

    def check(self) -> None:
        """Placed slabs and free extents tile the arena exactly once; ``free_slots`` is right."""
        spans = sorted([*self._placed.items(), *self.free_extents()])
        pos = 0
        for offset, size in spans:
            assert size > 0 and offset == pos, f"{self.name}: gap or overlap at slot {pos} (next span {offset})"
            pos = offset + size
        assert pos == self.capacity, f"{self.name}: spans cover {pos} of {self.capacity} slots"
        free = sum(size for _, size in self.free_extents())
        assert free == self.free_slots, f"{self.name}: free_slots {self.free_slots} != recomputed {free}"


class BuddyPlacement(Placement):
    """A binary buddy allocator. A non-power-of-two arena is cut into maximal aligned power-of-two roots
    (15,728 = 8192 + 4096 + 2048 + 1024 + 256 + 64 + 32 + 16); a slab is rounded up to a power of two,
    split off the smallest free block that holds it, and merged back with its buddy when freed."""

    name = "buddy"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._roots: list[tuple[int, int]] = []  # (offset, order), largest first
        offset = 0
        for order in range(capacity.bit_length() - 1, -1, -1):
            if capacity & (1 << order):
                self._roots.append((offset, order))
                offset += 1 << order
        self._free: list[set[int]] = [set() for _ in range(capacity.bit_length())]
        for offset, order in self._roots:
            self._free[order].add(offset)

    def physical_size(self, size: int) -> int:
        return 1 << max(size - 1, 0).bit_length()

    @property
    def largest_possible(self) -> int:
        return 1 << self._roots[0][1]

    def _root_order(self, offset: int) -> int:
        for start, order in self._roots:
            if start <= offset < start + (1 << order):
                return order
        raise AssertionError(f"buddy: offset {offset} outside the arena")

    def place(self, size: int) -> tuple[int, int] | None:
        order = max(size - 1, 0).bit_length()
        for have in range(order, len(self._free)):
            if self._free[have]:
                offset = min(self._free[have])
                self._free[have].remove(offset)
                while have > order:  # split, keeping the lower half
                    have -= 1
                    self._free[have].add(offset + (1 << have))
                self._placed[offset] = 1 << order
                self.free_slots -= 1 << order
                return offset, 1 << order
        return None

    def release(self, offset: int) -> int:
        size = self._placed.pop(offset)
        self.free_slots += size
        order = size.bit_length() - 1
        root_order = self._root_order(offset)
        while order < root_order:
            buddy = offset ^ (1 << order)
            if buddy not in self._free[order]:
                break
            self._free[order].remove(buddy)
            offset = min(offset, buddy)
            order += 1
        self._free[order].add(offset)
        return size

    def free_extents(self) -> list[tuple[int, int]]:
        return sorted((offset, 1 << order) for order, offsets in enumerate(self._free) for offset in offsets)

    def check(self) -> None:
        super().check()
        for order, offsets in enumerate(self._free):
            for offset in offsets:
                assert offset % (1 << order) == 0, f"buddy: free block {offset} of order {order} is misaligned"
                assert order <= self._root_order(offset), f"buddy: free block {offset} spans two roots"
                if order < self._root_order(offset):
                    assert offset ^ (1 << order) not in offsets, f"buddy: free buddies {offset} not merged"


class _ExtentPlacement(Placement):
    """Exact-size slabs; free space as sorted, coalesced extents (parallel lists of starts and sizes)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._starts = [0]
        self._sizes = [capacity]

    @abstractmethod
    def _choose(self, size: int) -> int | None:
        """Index of the free extent to carve the slab from."""

    def place(self, size: int) -> tuple[int, int] | None:
        i = self._choose(size)
        if i is None:
            return None
        offset = self._starts[i]
        if self._sizes[i] == size:
            del self._starts[i], self._sizes[i]
        else:
            self._starts[i] += size
            self._sizes[i] -= size
        self._placed[offset] = size
        self.free_slots -= size
        return offset, size

    def release(self, offset: int) -> int:
        size = self._placed.pop(offset)
        self.free_slots += size
        starts, sizes = self._starts, self._sizes
        i = bisect_left(starts, offset)
        end = offset + size
        if i < len(starts) and starts[i] == end:  # merge with the hole after
            size += sizes[i]
            del starts[i], sizes[i]
        if i > 0 and starts[i - 1] + sizes[i - 1] == offset:  # merge with the hole before
            sizes[i - 1] += size
        else:
            insort(starts, offset)
            sizes.insert(i, size)
        return end - offset

    def free_extents(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._sizes, strict=True))

    def check(self) -> None:
        super().check()
        for (a, n), (b, _) in zip(self.free_extents(), self.free_extents()[1:], strict=False):
            assert a + n < b, f"{self.name}: adjacent holes at {a} and {b} not coalesced"


class FirstFitPlacement(_ExtentPlacement):
    """The lowest-addressed hole that is large enough."""

    name = "first-fit"

    def _choose(self, size: int) -> int | None:
        return next((i for i, n in enumerate(self._sizes) if n >= size), None)


class BestFitPlacement(_ExtentPlacement):
    """The smallest hole that is large enough (lowest address on ties), keeping big holes for big slabs."""

    name = "best-fit"

    def _choose(self, size: int) -> int | None:
        fits = [(n, i) for i, n in enumerate(self._sizes) if n >= size]
        return min(fits)[1] if fits else None


PLACEMENTS: dict[str, type[Placement]] = {
    "buddy": BuddyPlacement,
    "first-fit": FirstFitPlacement,
    "best-fit": BestFitPlacement,
}


def placement_class(name: str) -> type[Placement]:
    """The placement called ``name``; an unknown name is a one-line ValueError listing the valid ones."""
    try:
        return PLACEMENTS[name]
    except KeyError:
        raise ValueError(f"unknown placement {name!r}; valid choices: {', '.join(PLACEMENTS)}") from None


def make_placement(name: str, capacity: int) -> Placement:
    return placement_class(name)(capacity)
