"""Parallel decoding: draft trees, drafters (trie memory, lookahead, hybrid), verification, acceptance."""
