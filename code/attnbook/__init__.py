"""attnbook: the shared, tested code of the executable textbook on attention.

Submodules (imported on first use, so ``import attnbook`` is cheap):

- ``attnbook.attention``: scaled dot-product attention and its helpers
- ``attnbook.masks``: causal and padding masks
- ``attnbook.efficient``: blockwise (online-softmax) attention and a key/value cache
- ``attnbook.layers``: ``SimpleAttention``, ``SelfAttention``, ``MultiHeadAttention``
  (with grouped-query heads, causal, RoPE or ALiBi, and a key/value cache)
- ``attnbook.positions``: sinusoidal positions, RoPE and ALiBi
- ``attnbook.lengths``: the length-generalisation experiment
- ``attnbook.decoder``: a LLaMA-style decoder built from the package's attention
- ``attnbook.compress``: a decoder's key/value cache shrunk: quantised keys and values,
  heavy-hitter eviction, a low-rank latent, each with the bytes it stores
- ``attnbook.circuits``: induction heads: repeated-token data, an attention-only model, head
  scores and ablation
- ``attnbook.plots``: the book's figure style and heatmaps
- ``attnbook.diagrams``: schematic pictures of the mechanism (one query's trip, multi-head)
- ``attnbook.pretrained``: real pretrained models, offline: all-MiniLM-L6-v2 (an encoder)
  and SmolLM2-135M (a decoder, run by ``attnbook.decoder``)
- ``attnbook.checks``: checkers for the exercises, run on a reader's code
- ``attnbook.timing``: timing in turns, and the measured ratio in words
- ``attnbook.training``: synthetic tasks, a tiny attention model and its training loop
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"

_SUBMODULES = ("attention", "checks", "circuits", "compress", "decoder", "diagrams", "efficient",
               "explorer", "layers", "lengths", "masks", "playgrounds", "plots", "positions",
               "pretrained", "timing", "training", "whisper")
__all__ = ["__version__", *_SUBMODULES]


def __getattr__(name: str) -> ModuleType:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
