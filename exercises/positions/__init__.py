"""Exercise of the chapter `positions`: your code is in solution.py."""
