"""Developer tools that run without the model (replay of recorded token streams)."""
