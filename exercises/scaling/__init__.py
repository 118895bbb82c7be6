"""Exercise of the chapter `scaling`: your code is in solution.py."""
