"""Exercise of the chapter `attention-maps`: your code is in solution.py."""
