"""Argument checks shared by the whole package: one rule per kind of argument.

Bad input gets a ``TypeError`` or ``ValueError`` that names the argument and says what it got,
raised before any arithmetic, never a bare ``RuntimeError`` from deep inside torch. Every
module takes its checks from here, so the same argument is judged the same way everywhere:
an integer is any :class:`numbers.Integral` (``3``, ``np.int64(3)``) but never a ``bool``;
a real number is any :class:`numbers.Real` but never a ``bool``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import TypeVar

import torch
from torch import Tensor

Choice = TypeVar("Choice")


def require_int(name: str, value: object, minimum: int | None = 1,
                maximum: int | None = None, *, reason: str = "") -> int:
    """``value`` as a Python int, at least ``minimum`` and at most ``maximum`` (``None``: no
    bound). ``reason``, if given, says why the bounds are there (" for a legible drawing")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if maximum is not None and minimum is not None and not minimum <= value <= maximum:
        raise ValueError(f"{name} must be between {minimum} and {maximum}{reason}, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}{reason}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}{reason}, got {value}")
    return value


def require_divides(name: str, value: int, whole_name: str, whole: int, why: str = "") -> int:
    """``whole // value``, once ``value`` is known to divide ``whole`` (both already ints);
    ``why`` says what the quotient is for (": each head needs d_model / num_heads features")."""
    if whole % value:
        raise ValueError(f"{name}={value} must divide {whole_name}={whole}{why}")
    return whole // value


def require_real(name: str, value: object, kind: str = "a real number") -> float:
    """``value`` as a finite Python float; ``kind`` says what was expected."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def require_choice(name: str, value: object, choices: Mapping[str, Choice]) -> Choice:
    """``choices[value]``, for ``value`` one of the mapping's keys."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return choices[value]


def require_function(name: str, value: object) -> Callable:
    """A callable that is not a class: a function, a lambda, a bound method or an instance."""
    if isinstance(value, type):
        raise TypeError(
            f"{name} must be a function, got the class {value.__name__}: pass a "
            f"function (or an instance of the class)"
        )
    if not callable(value):
        raise TypeError(f"{name} must be a function, got {type(value).__name__}")
    return value


def require_generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)), "
            f"got {type(generator).__name__}"
        )
    return generator


def require_tensor(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def broadcast_batch(*shapes: tuple[int, ...], names: str) -> torch.Size:
    """The broadcast of the batch shapes of the tensors called ``names``."""
    try:
        return torch.broadcast_shapes(*shapes)
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of {names} do not broadcast: got "
            + ", ".join(str(tuple(s)) for s in shapes)
        ) from None


def check_mask(mask: object, L: int, S: int, name: str = "mask") -> Tensor:
    """Check that ``mask`` is a boolean tensor broadcastable to ``(..., L, S)``.

    Raises:
        TypeError: if ``mask`` is not a tensor or not boolean (the message says how to
            convert a 0/1 or additive float mask).
        ValueError: if its last two dimensions cannot broadcast to ``(L, S)``.
    """
    mask = require_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}. "
            f"A 0/1 mask converts with `{name}.bool()`; an additive mask of 0 and -inf "
            f"converts with `{name} == 0`."
        )
    if mask.dim() < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions broadcastable to (..., L, S) = "
            f"(..., {L}, {S}), got shape {tuple(mask.shape)}"
        )
    rows, cols = mask.shape[-2:]
    if rows not in (1, L) or cols not in (1, S):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to (..., L, S) = "
            f"(..., {L}, {S})"
        )
    return mask


def check_bias(bias: object, L: int, S: int, dtype: torch.dtype) -> Tensor:
    """Check an additive score bias: a finite float tensor broadcastable to ``(..., L, S)``,
    returned in ``dtype`` (the dtype of the scores)."""
    bias = require_tensor("bias", bias)
    if not bias.is_floating_point():
        raise TypeError(
            f"bias must be a floating-point tensor added to the scores, got dtype "
            f"{bias.dtype}; to forbid keys, pass a boolean mask instead"
        )
    if bias.dim() < 2 or bias.shape[-2] not in (1, L) or bias.shape[-1] not in (1, S):
        raise ValueError(
            f"bias of shape {tuple(bias.shape)} does not broadcast to (..., L, S) = "
            f"(..., {L}, {S})"
        )
    if not bool(torch.isfinite(bias).all()):
        raise ValueError("bias must be finite: to forbid keys, pass a boolean mask instead")
    return bias.to(dtype)


def check_qkv(q: object, k: object, v: object) -> tuple[Tensor, Tensor, Tensor]:
    """Check queries ``(..., L, E)``, keys ``(..., S, E)`` and values ``(..., S, Ev)``: float
    tensors of one dtype whose sizes fit together, with at least one key."""
    q = require_tensor("q", q)
    k = require_tensor("k", k)
    v = require_tensor("v", v)
    for name, t, letters in (("q", q, "(..., L, E)"), ("k", k, "(..., S, E)"),
                             ("v", v, "(..., S, Ev)")):
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape {letters}, got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same feature size E: q has shape {tuple(q.shape)} "
            f"(E={q.shape[-1]}), k has shape {tuple(k.shape)} (E={k.shape[-1]})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length S: k has shape {tuple(k.shape)} "
            f"(S={k.shape[-2]}), v has shape {tuple(v.shape)} (S={v.shape[-2]})"
        )
    if k.shape[-2] == 0:
        raise ValueError(f"k must hold at least one key (S >= 1), got shape {tuple(k.shape)}")
    return q, k, v


def scale_factor(scale: object, E: int) -> float:
    """The factor applied to the scores: ``1 / sqrt(E)`` for ``None``, else ``scale``."""
    if scale is None:
        return 1.0 / math.sqrt(E)
    return require_real("scale", scale, "a real number or None")


def layer_input(name: str, x: object, width: int, dtype: torch.dtype, *,
                batched: bool = False) -> Tensor:
    """Check a layer's input: a tensor ``(..., L, width)`` (``(B, L, width)`` when
    ``batched``) in the dtype of the layer's parameters."""
    x = require_tensor(name, x)
    letters = "(B, L, d_model)" if batched else "(..., L, n_embd)"
    if (batched and x.dim() != 3) or x.dim() < 2:
        raise ValueError(f"{name} must have shape {letters}, got shape {tuple(x.shape)}")
    if x.shape[-1] != width:
        raise ValueError(
            f"{name} has width {x.shape[-1]} (shape {tuple(x.shape)}) but the layer "
            f"expects {width}"
        )
    if x.dtype != dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the layer's parameters are {dtype}; "
            f"convert one with .to()"
        )
    return x
