"""Every allocator checks every constructor option, used or not (catalog files' bad values:
`test_catalog_bad_input.py`)."""

import numpy as np
import pytest

from allocators import ALLOCATORS, make_allocator


@pytest.mark.parametrize("name", sorted(ALLOCATORS))
def test_every_allocator_checks_every_option(name):
    with pytest.raises(ValueError, match="unknown placement 'worst-fit'; valid choices: buddy, first-fit"):
        make_allocator(name, 1024, placement="worst-fit")
    with pytest.raises(ValueError, match="--max-model-len must be a positive integer, got True"):
        make_allocator(name, 1024, max_model_len=True)
    with pytest.raises(ValueError, match="prefix_caching must be True or False"):
        make_allocator(name, 1024, prefix_caching="yes")
    alloc = make_allocator(name, 1024, max_model_len=512, placement="best-fit")
    assert (alloc.capacity, alloc.max_model_len) == (1024, 512)


@pytest.mark.parametrize("name", sorted(ALLOCATORS))
def test_capacity_is_a_whole_number_of_slots(name):
    """1000.7 slots ran as 1000 without a word; a numpy integer (a value read off a frame) is a count."""
    for bad in (1000.7, 1024.0, True, "1024"):
        with pytest.raises(ValueError, match=f"capacity must be a whole number of token slots, got {bad!r}"):
            make_allocator(name, bad)
    assert make_allocator(name, np.int64(1024)).capacity == 1024
