"""Exercise of the chapter `efficient-attention`: your code is in solution.py."""
