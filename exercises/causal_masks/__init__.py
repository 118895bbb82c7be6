"""Exercise of the chapter `causal-masks`: your code is in solution.py."""
