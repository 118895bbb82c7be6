"""Exercise of the chapter `dot-product-similarity`: your code is in solution.py."""
