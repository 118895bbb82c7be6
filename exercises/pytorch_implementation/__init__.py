"""Exercise of the chapter `pytorch-implementation`: your code is in solution.py."""
