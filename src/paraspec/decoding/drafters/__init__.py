"""The drafters (memory_decoding, lookahead, hybrid) and their candidate sources, the table of
plugins that names them, and the registry that builds them per engine."""
