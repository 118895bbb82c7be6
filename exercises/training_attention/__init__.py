"""Exercise of the chapter `training-attention`: your code is in solution.py."""
