"""Exercises of the chapter `induction-heads`: your code is in solution.py."""
