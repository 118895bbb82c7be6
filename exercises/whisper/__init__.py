"""Exercises of the chapter `whisper`: your code is in solution.py."""
