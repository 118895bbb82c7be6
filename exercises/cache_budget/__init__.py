"""Exercises of the chapter `cache-budget`: your code is in solution.py."""
