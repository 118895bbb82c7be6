"""attnbook: the shared, tested code of the executable textbook on attention.

Submodules (imported on first use, so ``import attnbook`` is cheap):

- ``attnbook.attention``: scaled dot-product attention and its helpers
- ``attnbook.masks``: causal and padding masks
- ``attnbook.efficient``: blockwise (online-softmax) attention and a key/value cache
- ``attnbook.layers``: ``SimpleAttention``, ``SelfAttention``, ``MultiHeadAttention``
- ``attnbook.plots``: the book's figure style and heatmaps
- ``attnbook.diagrams``: schematic pictures of the mechanism (one query's trip, multi-head)
- ``attnbook.pretrained``: a real pretrained transformer (all-MiniLM-L6-v2), offline
- ``attnbook.checks``: checkers for the exercises, run on a reader's code
- ``attnbook.timing``: timing in turns, and the measured ratio in words
- ``attnbook.training``: synthetic tasks, a tiny attention model and its training loop
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"

_SUBMODULES = ("attention", "checks", "diagrams", "efficient", "explorer", "layers", "masks",
               "playgrounds", "plots", "pretrained", "timing", "training")
__all__ = ["__version__", *_SUBMODULES]


def __getattr__(name: str) -> ModuleType:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
