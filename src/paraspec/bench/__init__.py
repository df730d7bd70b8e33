"""Benchmarks for `paraspec bench`: task sets built offline from real text (see `tasks`)."""
