"""Exercise of the chapter `static-embeddings`: your code is in solution.py."""
