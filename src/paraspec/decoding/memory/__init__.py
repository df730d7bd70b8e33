"""What the drafters remember across requests (the token trie, the output memory) and the file
that keeps it over a restart."""
