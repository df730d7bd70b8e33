"""Structured outputs: a grammar (JSON schema, regex, Lark / GBNF, a choice) constrains every
token a sequence draws, at every node of the draft tree, and tokens the grammar alone decides are
drafted for free. params.py: what a request asks (plain data); grammar.py: the compiled grammar
(llguidance, the `paraspec[structured]` extra); sampler.py: the per-sequence constrained sampler;
forced.py: the draft tree cut to what the grammar allows, plus its forced tokens."""
