"""Reference solution of exercises/pytorch_implementation: the package's SimpleAttention."""

from __future__ import annotations

from attnbook.layers import SimpleAttention


class MySimpleAttention(SimpleAttention):
    """``attnbook.layers.SimpleAttention``: its forward returns ``(output, weights)``."""
