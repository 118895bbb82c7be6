"""The checker of the chapter ``pytorch-implementation``: :func:`check_simple_attention`."""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn

from ..layers import SimpleAttention
from .compare import Mismatch, expect_close, expect_pair, randn
from .harness import Checks, call_reader, error_hints

# pytest leaves this module's frames out of its tracebacks: a reader sees their own code.
__tracebackhide__ = True
__all__ = ["check_simple_attention"]


_PROJECTIONS = ("query", "key", "value")


_module_hint = error_hints(
    ((RuntimeError, IndexError), "",
     "forward must accept a batch (B, L, n_embd) and a single sequence (L, n_embd): "
     "transpose the keys with `k.transpose(-2, -1)`, not `k.T` or `k.transpose(1, 2)`, and "
     "take the softmax over dim=-1."),
)


def _check_projections(module: nn.Module, owner: str, n_embd: int | None) -> int:
    """Fail unless ``module`` has square ``nn.Linear`` layers query, key and value with a bias;
    return their width."""
    children = ", ".join(f"{name}: {type(child).__name__}"
                         for name, child in module.named_children()) or "none"
    hint = ("in __init__, create `self.query = nn.Linear(n_embd, n_embd)`, and `self.key` "
            "and `self.value` the same way (with a bias, the default).")
    for name in _PROJECTIONS:
        layer = getattr(module, name, None)
        if layer is None:
            raise Mismatch(f"{owner} has no layer named `{name}`",
                           [f"your module's layers: {children}"], hint)
        if not isinstance(layer, nn.Linear):
            raise Mismatch(f"{owner}.{name} is {type(layer).__name__}, expected an "
                           f"nn.Linear", [f"your module's layers: {children}"], hint)
        width = layer.in_features if n_embd is None else n_embd
        if (layer.in_features, layer.out_features) != (width, width):
            raise Mismatch(f"{owner}.{name} is nn.Linear({layer.in_features}, "
                           f"{layer.out_features}), expected nn.Linear({width}, {width})",
                           [], hint)
        if layer.bias is None:
            raise Mismatch(f"{owner}.{name} has no bias", [], hint)
        n_embd = width
    assert n_embd is not None
    return n_embd


def _reference_copy(module: nn.Module, n_embd: int) -> SimpleAttention:
    """A fresh :class:`SimpleAttention` with the projections of ``module`` (read only)."""
    reference = SimpleAttention(n_embd).to(module.query.weight.dtype)
    with torch.no_grad():
        for name in _PROJECTIONS:
            getattr(reference, name).weight.copy_(getattr(module, name).weight)
            getattr(reference, name).bias.copy_(getattr(module, name).bias)
    return reference


def check_simple_attention(layer: type[nn.Module] | nn.Module) -> None:
    """Check a ``SimpleAttention``: ``softmax(Q K^T) V`` with no scaling.

    The exercise of the chapter ``pytorch-implementation``: an ``nn.Module`` built as
    ``layer(n_embd)`` with three ``nn.Linear(n_embd, n_embd)`` named ``query``, ``key`` and
    ``value``, whose ``forward(x)`` takes ``(B, L, n_embd)`` or ``(L, n_embd)`` and returns
    ``(output, weights)`` of shapes ``(..., L, n_embd)`` and ``(..., L, L)``. The reference
    is :class:`attnbook.layers.SimpleAttention` with the reader's weights copied into it.

    Args:
        layer: the class (it is built with ``n_embd = 8`` and ``5``) or one instance (it is
            copied first). Either way the reader's objects are left untouched.

    Raises:
        TypeError: if ``layer`` is neither an ``nn.Module`` subclass nor an instance of one.
        ExerciseCheckError: at the first failing check.
    """
    if isinstance(layer, type):
        if not issubclass(layer, nn.Module):
            raise TypeError(f"layer must be an nn.Module subclass or instance, got the class "
                            f"{layer.__name__}, which does not derive from nn.Module")
        owner = layer.__name__
    elif isinstance(layer, nn.Module):
        owner = type(layer).__name__
    else:
        raise TypeError(f"layer must be an nn.Module subclass or instance, got "
                        f"{type(layer).__name__}")
    checks = Checks("check_simple_attention", _module_hint)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the reader's initialisation: reproducible, global state kept
        if isinstance(layer, type):
            for n_embd in (8, 5):
                with checks.case(f"{owner}({n_embd}) builds query, key and value as "
                                 f"nn.Linear({n_embd}, {n_embd})"):
                    module = call_reader(f"{owner}({n_embd})", layer, n_embd)
                    _check_projections(module, owner, n_embd)
                _check_simple_attention_module(checks, module, owner)
        else:
            with checks.case(f"your {owner} has query, key and value as square nn.Linear"):
                _check_projections(layer, owner, None)
            try:
                module = copy.deepcopy(layer)  # run on a copy: the reader's stays as it is
            except Exception as error:
                raise TypeError(f"layer could not be copied with copy.deepcopy "
                                f"({type(error).__name__}: {error}); pass the class "
                                f"instead") from error
            _check_simple_attention_module(checks, module, owner)
    checks.passed()


def _check_simple_attention_module(checks: Checks, module: nn.Module, owner: str) -> None:
    """The forward checks of :func:`check_simple_attention` on one module the checker owns."""
    n = module.query.in_features
    reference = _reference_copy(module, n)
    state = {key: value.clone() for key, value in module.state_dict().items()}
    call = f"{owner}.forward(x)"

    def run(x: Tensor) -> None:
        x = x.to(module.query.weight.dtype)
        with torch.no_grad():
            result = call_reader(call, module, x.clone(), names=("x",))
            got_output, got_weights = expect_pair(call, result, "output", "weights")
            expected = reference(x)
            q, k = reference.query(x), reference.key(x)  # each (..., L, n_embd)
            scores = q @ k.transpose(-2, -1)  # (..., L, L)
        weights = expected.weights
        expect_close(
            "weights", got_weights, weights,
            hint="weights = softmax(Q K^T) over the last dimension, with Q = self.query(x) "
                 "and K = self.key(x).",
            mistakes=[
                (f"did you divide by sqrt(n_embd) = sqrt({n})? This exercise is unscaled: "
                 f"softmax(Q K^T) V.", lambda: torch.softmax(scores / math.sqrt(n), dim=-1)),
                ("the softmax runs over the wrong dimension: use dim=-1, so that each "
                 "query's row sums to 1.", lambda: torch.softmax(scores, dim=-2)),
                ("the scores are Q K^T (row i: query i against every key), not K Q^T.",
                 lambda: torch.softmax(scores.transpose(-2, -1), dim=-1)),
                ("compute the scores from the projections q = self.query(x) and "
                 "k = self.key(x), not from x itself.",
                 lambda: torch.softmax(x @ x.transpose(-2, -1), dim=-1)),
                ("these are the scores Q K^T: apply the softmax to them.", lambda: scores)])
        expect_close(
            "output", got_output, expected.output,
            hint="output = weights @ V with V = self.value(x).",
            mistakes=[("mix the values V = self.value(x), not x.", lambda: weights @ x),
                      ("mix the values V = self.value(x), not the queries.",
                       lambda: weights @ q),
                      ("mix the values V = self.value(x), not the keys.",
                       lambda: weights @ k)])

    with checks.case(f"{owner}({n}) on a batch x of shape (2, 5, {n})"):
        run(randn(2, 5, n, seed=51))
    with checks.case(f"{owner}({n}) on a single sequence x of shape (7, {n})"):
        run(randn(7, n, seed=52))
    with checks.case(f"{owner}({n}) on one token, x of shape (3, 1, {n})"):
        run(randn(3, 1, n, seed=53))
    with checks.case(f"{owner}({n}) on larger inputs, 3 · randn (2, 6, {n})"):
        run(randn(2, 6, n, seed=54, scale=3.0))
    with checks.case(f"{owner}({n}): forward leaves the parameters unchanged and gradients "
                     f"reach query, key and value"):
        for key, value in module.state_dict().items():
            if not torch.equal(value, state[key]):
                raise Mismatch(f"forward changed the parameter {key}", [],
                               "forward must only read the layers' weights.")
        x = randn(2, 4, n, seed=55).to(module.query.weight.dtype)
        output, weights = expect_pair(call, call_reader(call, module, x, names=("x",)),
                                      "output", "weights")
        module.zero_grad(set_to_none=True)
        loss = (output * randn(2, 4, n, seed=56).to(x.dtype)).sum()
        try:
            loss.backward()
        except RuntimeError as error:
            raise Mismatch("no gradient flows from the output back to the layers",
                           [f"backward() raised: {error}"],
                           "keep the computation differentiable: no `torch.no_grad()`, "
                           "`.detach()`, `.item()` or `.numpy()` inside forward.") from None
        for name in _PROJECTIONS:
            grad = getattr(module, name).weight.grad
            if grad is None or not torch.isfinite(grad).all() or not grad.any():
                raise Mismatch(f"no gradient reaches {name}.weight", [],
                               "keep the computation differentiable: no `torch.no_grad()`, "
                               "`.detach()` or new tensors built from `.tolist()`.")
        module.zero_grad(set_to_none=True)
