"""Requests in: trace readers, synthetic generators and presets. Knows nothing of allocators or time."""
