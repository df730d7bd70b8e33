"""Model definition (forward only), KV cache, weight loading and tokenizer."""
