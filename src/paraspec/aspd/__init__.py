"""ASPD (adaptive serial-parallel decoding, arXiv 2508.08895): markup, layout, grammar, branch decoding,
and (TRAIN's modules) data, training and evaluation. See README "ASPD" and shared/research/aspd.md."""
