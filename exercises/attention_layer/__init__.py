"""Exercises of the chapter `attention-layer`: your code is in solution.py."""
