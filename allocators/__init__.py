"""KV memory managers (contiguous slabs, paged blocks, paged copy-on-write) and their waste accounting."""
