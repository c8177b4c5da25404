"""`albert bench`: albert-lm against transformers on the same weights, each side in its own process."""
