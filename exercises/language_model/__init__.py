"""Exercise of the chapter `language-model`: your code is in solution.py."""
