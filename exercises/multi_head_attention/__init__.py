"""Exercise of the chapter `multi-head-attention`: your code is in solution.py."""
