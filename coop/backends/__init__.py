"""Backends: the memory behind an arena, and the hooks that route an array library's allocations into it."""
