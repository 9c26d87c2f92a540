"""Every allocator checks every constructor option, used or not (catalog files' bad values:
`test_catalog_bad_input.py`)."""

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
