"""The contract between the engine and what drafts: a proposal's draft tree, the query that
verifies it, the walk that accepts it, decode modes, and the per-sequence figures (and the
clock that times them)."""
