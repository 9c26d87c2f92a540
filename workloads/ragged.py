"""Ragged integer lists (each request's ``prefix_hashes``) as Arrow-style offsets plus one flat value array.

Readers meet the lists in three shapes: JSON lists, space-separated strings in a CSV cell, Arrow list arrays.
Each parser returns ``Ragged(offsets, values, bad)`` where ``bad`` flags rows whose list could not be read
(those rows then get an error or are skipped like any other bad row), and ``text`` says the lists were text
(whole numbers separated by spaces, ``0 1 2``), so that the error says which form was expected: a JSON list
written into a CSV cell (``[0, 1, 2]``, what pandas' ``to_csv`` writes for a list) is refused, not guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_HASH = 2**63 - 1


@dataclass(frozen=True)
class Ragged:
    offsets: np.ndarray
    values: np.ndarray
    bad: np.ndarray
    text: bool = False

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def take(self, index: np.ndarray) -> Ragged:
        offsets, values = take_ragged(self.offsets, self.values, index)
        return Ragged(offsets, values, self.bad[index], self.text)


def take_ragged(offsets: np.ndarray, values: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lists at ``index``, in that order, as new (offsets, values); vectorised."""
    index = np.asarray(index, np.int64)
    counts = np.diff(offsets)[index]
    new_offsets = np.zeros(len(index) + 1, np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    starts = np.repeat(offsets[:-1][index] - new_offsets[:-1], counts)
    return new_offsets, values[starts + np.arange(new_offsets[-1], dtype=np.int64)]


def empty(rows: int) -> Ragged:
    return Ragged(np.zeros(rows + 1, np.int64), np.zeros(0, np.int64), np.zeros(rows, bool))


def _valid_int(x: object) -> bool:
    return type(x) is int and 0 <= x <= MAX_HASH


def from_lists(cells: list[object]) -> Ragged:
    """From Python lists (JSON); ``None`` is an empty list, anything but a list of ints >= 0 is bad."""
    bad = np.zeros(len(cells), bool)
    counts = np.zeros(len(cells), np.int64)
    flat: list[int] = []
    for i, cell in enumerate(cells):
        if cell is None:
            continue
        if type(cell) is list and all(_valid_int(x) for x in cell):
            counts[i] = len(cell)
            flat.extend(cell)
        else:
            bad[i] = True
    offsets = np.zeros(len(cells) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Ragged(offsets, np.array(flat, dtype=np.int64), bad)


def from_strings(cells: np.ndarray) -> Ragged:
    """From CSV cells like ``"0 1 2"`` (missing or blank cells are empty lists). One join and one
    vectorised parse in the common case; row by row only to find the bad rows when that parse fails."""
    text = ["" if not isinstance(c, str) else c.strip() for c in cells]
    counts = np.array([len(t.split()) for t in text], np.int64)
    offsets = np.zeros(len(text) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    bad = np.array([not isinstance(c, str) and c is not None and c == c for c in cells], bool)
    try:
        values = np.array(" ".join(text).split(), dtype=np.int64)
        if (values < 0).any():
            raise ValueError("negative hash")
        return Ragged(offsets, values, bad, text=True)
    except (ValueError, OverflowError):
        pass
    lists: list[object] = []
    for t, was_bad in zip(text, bad, strict=True):
        try:
            parsed = [int(x) for x in t.split()]
            lists.append(None if was_bad else parsed)
        except ValueError:
            lists.append("bad")
    result = from_lists(lists)
    return Ragged(result.offsets, result.values, result.bad | bad, text=True)


def from_arrow(column) -> Ragged:
    """From a pyarrow (chunked) list-of-integers column; nulls are empty lists."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        return from_strings(np.asarray(array.to_pylist(), dtype=object))
    if not pa.types.is_integer(array.type.value_type):
        return from_lists(array.to_pylist())
    offsets = np.asarray(array.offsets, np.int64)
    values = np.asarray(array.values.slice(offsets[0], offsets[-1] - offsets[0]).fill_null(-1), np.int64)
    offsets = offsets - offsets[0]
    counts = np.diff(offsets)
    row_of = np.repeat(np.arange(len(array)), counts)
    bad = np.zeros(len(array), bool)
    bad[row_of[values < 0]] = True
    return Ragged(offsets, values, bad)
