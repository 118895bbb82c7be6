"""Shrinking a decoder's key/value cache: fewer bits, fewer tokens, or a low-rank latent.

A full cache grows by ``2 * layers * h_kv * d_head`` numbers a token
(:meth:`attnbook.decoder.DecoderConfig.cache_bytes_per_token`). Each way of shrinking it
is here with the exact bytes it stores, so that a chapter can set the quality it costs
against the memory it saves:

- **Fewer bits.** :func:`quantize` rounds a tensor of keys or values ``(..., t, C)`` to
  ``bits``-bit integer codes, min-max and asymmetric: every group of numbers stores its
  minimum and a step, and each number the nearest of ``2**bits`` levels between. A group
  lies along the channels of one token (``per="token"``) or along the tokens of one
  channel (``per="channel"``); keys want the second and values the first (KIVI, Liu et
  al., 2024). :class:`Quantized` holds the codes and counts their bytes, scales included.
  :func:`quantized_kv` puts it into a decoder, right after the key and value
  projections, before RoPE (pre-RoPE keys, as in KVQuant, Hooper et al., 2024).
- **Fewer tokens.** :class:`HeavyHitterCache` keeps a fixed budget of positions per
  key/value head: the newest ones, the first ``sinks``, and the "heavy hitters" that
  have received the most attention so far (H2O, Zhang et al., 2023). A plain window with
  sinks (StreamingLLM, Xiao et al., 2024) is :class:`attnbook.efficient.KVCache` with
  ``recent`` and ``sinks``. :func:`decode_losses` runs a text through a decoder one token
  at a time, so that a cache that forgets is measured the way it is used;
  :func:`heavy_hitter_kv` gives the same losses in one pass (each layer masked by
  :func:`heavy_hitter_mask`, the decoding loop replayed on its scores), fast enough for
  a long text.
- **A low-rank latent.** :func:`low_rank_kv` caches one ``rank``-wide vector a token and
  layer instead of the keys and values, and rebuilds both from it: DeepSeek-V2's
  multi-head latent attention (DeepSeek-AI, 2024), but obtained from a model that was not
  trained for it, by the truncated SVD of its stacked key and value projections
  (:func:`low_rank_factors`).

Shapes: keys ``(..., t, E)`` and values ``(..., t, Ev)``, ``t`` positions; inside a
decoder the projections give ``(B, L, h_kv * d_head)``, one head's channels side by side.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ._validate import require_choice, require_divides, require_int, require_tensor
from .decoder import Decoder
from .efficient import KVCache
from .masks import causal_mask
from .positions import rope

__all__ = ["HeavyHitterCache", "Quantized", "decode_losses", "heavy_hitter_keep",
           "heavy_hitter_kv", "heavy_hitter_mask", "low_rank_factors", "low_rank_kv",
           "projection_inputs", "quantize", "quantized_kv"]

#: Where the numbers that share one scale lie, for a tensor ``(..., t, C)``: the axis a
#: group runs along.
_GROUP_AXIS = {"token": -1, "channel": -2}
#: The dtypes a scale and a minimum may be stored in.
_SCALE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class Quantized:
    """A tensor stored as integer codes, a step and a minimum per group (see :func:`quantize`).

    Attributes:
        codes: the codes, ``0 .. 2**bits - 1``, grouped: the tensor's group axis moved
            last and split into ``(groups, group)``. One code per byte or per int32 in
            memory; :attr:`nbytes` counts them packed, ``bits`` each.
        scale: the step between levels, one per group, ``(..., groups, 1)``.
        zero: the group's minimum (the value of code 0), one per group.
        bits: the bits per code.
        per: ``"token"`` or ``"channel"``.
        shape: the shape of the tensor that was quantised.
        dtype: its dtype, which :meth:`dequantize` gives back.
    """

    codes: Tensor
    scale: Tensor
    zero: Tensor
    bits: int
    per: str
    shape: torch.Size
    dtype: torch.dtype

    @property
    def group(self) -> int:
        """How many numbers share one scale and one minimum."""
        return self.codes.shape[-1]

    @property
    def nbytes(self) -> int:
        """The bytes this takes when stored: every code in ``bits`` bits, packed, plus one
        scale and one minimum per group in their dtype."""
        code_bytes = math.ceil(self.codes.numel() * self.bits / 8)
        return code_bytes + (self.scale.numel() + self.zero.numel()) * self.scale.element_size()

    def dequantize(self) -> Tensor:
        """The tensor the codes stand for, ``codes * scale + zero``, in its shape and dtype."""
        work = torch.float64 if self.dtype == torch.float64 else torch.float32
        grouped = self.codes.to(work) * self.scale.to(work) + self.zero.to(work)
        flat = grouped.flatten(-2)  # (..., the group axis)
        return flat.movedim(-1, _GROUP_AXIS[self.per]).to(self.dtype)


def quantize(x: Tensor, bits: int, *, per: str, group: int | None = None,
             scale_dtype: torch.dtype = torch.float16) -> Quantized:
    """Round ``x`` to ``bits``-bit codes, min-max and asymmetric, one scale per group.

    Each group of ``group`` numbers keeps its minimum ``zero`` and a step
    ``scale = (max - min) / (2**bits - 1)``, both rounded to ``scale_dtype`` as they are
    stored; every number becomes the code ``round((x - zero) / scale)``, clamped to
    ``0 .. 2**bits - 1``. A group whose numbers are all equal has a step of zero and is
    kept exactly. With ``scale_dtype=torch.float32`` and float32 ``x``, every number
    comes back within half a step of where it was.

    Args:
        x: keys or values, ``(..., t, C)``: ``t`` positions of ``C`` channels.
        bits: bits per code, 1 to 16.
        per: ``"token"``: a group lies along the channels of one position (``group``
            defaults to ``C``); ``"channel"``: along the positions of one channel
            (``group`` defaults to ``t``).
        group: how many numbers share a scale; must divide the axis it runs along.
        scale_dtype: how the scales and minima are stored.

    Returns:
        A :class:`Quantized`; ``.dequantize()`` gives the rounded tensor and ``.nbytes``
        what it stores.

    Raises:
        TypeError: if ``x`` is not a floating-point tensor, ``bits`` or ``group`` not an
            int, or ``scale_dtype`` not a floating-point dtype.
        ValueError: if ``x`` has fewer than 2 dimensions or non-finite entries, ``bits``
            is outside 1-16, ``per`` is unknown, ``group`` does not divide its axis, or a
            group's minimum or step does not fit ``scale_dtype``.
    """
    x = require_tensor("x", x)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., t, C), got {tuple(x.shape)}")
    bits = require_int("bits", bits, minimum=1, maximum=16)
    axis = require_choice("per", per, _GROUP_AXIS)
    if scale_dtype not in _SCALE_DTYPES:
        raise TypeError(f"scale_dtype must be one of {[str(d) for d in _SCALE_DTYPES]}, "
                        f"got {scale_dtype!r}")
    length = x.shape[axis]
    along = "channels C" if per == "token" else "positions t"
    group = length if group is None else require_int("group", group)
    if length == 0 or length % group:
        raise ValueError(f'group={group} must divide the {along} of x (per="{per}"), '
                         f"which are {length} in x of shape {tuple(x.shape)}")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    grouped = x.to(work).movedim(axis, -1).unflatten(-1, (length // group, group))
    if not bool(torch.isfinite(grouped).all()):
        raise ValueError("x must hold finite numbers only")
    low = grouped.amin(-1, keepdim=True)  # (..., groups, 1)
    levels = 2 ** bits - 1
    zero = low.to(scale_dtype)
    scale = ((grouped.amax(-1, keepdim=True) - low) / levels).to(scale_dtype)
    if not (bool(torch.isfinite(zero).all()) and bool(torch.isfinite(scale).all())):
        raise ValueError(f"x holds numbers too large for scales in {scale_dtype}: pass a "
                         f"wider scale_dtype")
    step = scale.to(work)
    nonzero = step > 0
    codes = torch.where(nonzero, (grouped - zero.to(work)) / torch.where(nonzero, step, 1.0),
                        0.0)
    codes = codes.round().clamp(0, levels).to(torch.uint8 if bits <= 8 else torch.int32)
    return Quantized(codes, scale, zero, bits, per, x.shape, x.dtype)


def _per_and_group(name: str, per: str, group: int | None) -> tuple[str, int | None]:
    require_choice(f"{name}_per", per, _GROUP_AXIS)
    if per == "channel" and group is None:
        raise ValueError(
            f'{name}_per="channel" needs {name}_group, the positions that share a scale: '
            f"a cache quantises a channel once a group of tokens is complete"
        )
    return per, None if group is None else require_int(f"{name}_group", group)


@contextlib.contextmanager
def _replaced_projections(decoder: Decoder,
                          keys: Callable[[int, Tensor, Tensor], Tensor] | None,
                          values: Callable[[int, Tensor, Tensor], Tensor] | None
                          ) -> Iterator[Decoder]:
    """Within the block, every block's key (value) projection returns
    ``keys(block_index, input, output)`` instead of its output."""
    if not isinstance(decoder, Decoder):
        raise TypeError(f"decoder must be an attnbook.decoder.Decoder, got "
                        f"{type(decoder).__name__}")
    handles = []
    try:
        for index, block in enumerate(decoder.blocks):
            for projection, replace in ((block.attn.k_proj, keys), (block.attn.v_proj, values)):
                if replace is not None:
                    def hook(module, inputs, output, index=index, replace=replace):
                        return replace(index, inputs[0], output)
                    handles.append(projection.register_forward_hook(hook))
        yield decoder
    finally:
        for handle in handles:
            handle.remove()


def quantized_kv(decoder: Decoder, *, key_bits: int | None = None, key_per: str = "channel",
                 key_group: int | None = None, value_bits: int | None = None,
                 value_per: str = "token", value_group: int | None = None,
                 scale_dtype: torch.dtype = torch.float16
                 ) -> contextlib.AbstractContextManager[Decoder]:
    """A context in which ``decoder``'s keys and values are rounded as a quantised cache
    would store them: ``with quantized_kv(model, key_bits=4, key_group=128): model(ids)``.

    Every block's key and value projections give their outputs ``(B, L, h_kv * d_head)``
    through :func:`quantize` (dequantised), so RoPE rotates rounded keys and attention
    reads rounded values. ``per="token"`` groups default to one head's ``d_head``
    channels; ``per="channel"`` groups are ``group`` consecutive positions, and ``L``
    must be a multiple of it: this is for a whole text at once (a perplexity), not for
    decoding one token at a time. Within a group, the rounding of early positions uses
    the later positions' minimum and maximum, as a group quantised once complete does.

    Args:
        decoder: an :class:`attnbook.decoder.Decoder`.
        key_bits, value_bits: bits per code, 1-16, or ``None`` to leave them exact.
        key_per, value_per: ``"token"`` or ``"channel"``.
        key_group, value_group: numbers per scale (see :func:`quantize`); required for
            ``"channel"``.
        scale_dtype: how scales and minima are stored.

    Raises:
        TypeError, ValueError: for a decoder that is not a ``Decoder`` and for arguments
            :func:`quantize` refuses (when the model runs, for a length that is not a
            multiple of a channel group).
    """
    d_head = decoder.config.d_head if isinstance(decoder, Decoder) else None
    replaced = {}
    for name, bits, per, group in (("key", key_bits, key_per, key_group),
                                   ("value", value_bits, value_per, value_group)):
        if bits is None:
            replaced[name] = None
            continue
        bits = require_int(f"{name}_bits", bits, minimum=1, maximum=16)
        per, group = _per_and_group(name, per, group)
        if per == "token" and group is None:
            group = d_head

        def rounded(index, inputs, output, bits=bits, per=per, group=group, name=name):
            axis_length = output.shape[_GROUP_AXIS[per]]
            if group is None or axis_length % group:
                raise ValueError(f"{name}_group={group} must divide the "
                                 f"{'channels' if per == 'token' else 'positions'} of the "
                                 f"{name}s, {axis_length} here (shape {tuple(output.shape)})")
            return quantize(output, bits, per=per, group=group,
                            scale_dtype=scale_dtype).dequantize()
        replaced[name] = rounded
    if scale_dtype not in _SCALE_DTYPES:
        raise TypeError(f"scale_dtype must be one of {[str(d) for d in _SCALE_DTYPES]}, "
                        f"got {scale_dtype!r}")
    return _replaced_projections(decoder, replaced["key"], replaced["value"])


def low_rank_factors(weight: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """The best rank-``rank`` factorisation ``weight ≈ up @ down`` (Eckart-Young).

    From the SVD ``weight = U diag(s) Vh``: ``down = Vh[:rank]`` ``(rank, d_in)`` and
    ``up = U[:, :rank] * s[:rank]`` ``(d_out, rank)``. The Frobenius norm of
    ``weight - up @ down`` is the root sum of squares of the singular values left out.

    Args:
        weight: a matrix ``(d_out, d_in)``.
        rank: from 1 to ``min(d_out, d_in)``.

    Raises:
        TypeError: if ``weight`` is not a floating-point tensor or ``rank`` not an int.
        ValueError: if ``weight`` is not a matrix or ``rank`` is out of range.
    """
    weight = require_tensor("weight", weight)
    if not weight.is_floating_point():
        raise TypeError(f"weight must be a floating-point tensor, got {weight.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be a matrix (d_out, d_in), got {tuple(weight.shape)}")
    rank = require_int("rank", rank, minimum=1, maximum=min(weight.shape))
    work = torch.float64 if weight.dtype == torch.float64 else torch.float32
    U, s, Vh = torch.linalg.svd(weight.detach().to(work), full_matrices=False)
    return ((U[:, :rank] * s[:rank]).to(weight.dtype),  # (d_out, rank)
            Vh[:rank].to(weight.dtype))  # (rank, d_in)


def low_rank_kv(decoder: Decoder, rank: int, *, calibration: Tensor | None = None
                ) -> contextlib.AbstractContextManager[Decoder]:
    """A context in which every block caches a ``rank``-wide latent a token instead of its
    keys and values: ``with low_rank_kv(model, 64): model(ids)``.

    For each block, the key and value projections are stacked, ``W = [W_k; W_v]``
    ``(2 * h_kv * d_head, d_model)``, and factored, ``W ≈ up @ down``: the latent is
    ``c = x @ down.T`` (what the cache would hold, ``rank`` numbers), and keys and values
    are rebuilt as ``c @ up.T`` before RoPE. One latent serves both, as in multi-head
    latent attention, but the factors come from the trained projections, not from
    training with them. Biases, if any, are added back exactly.

    Without ``calibration`` the factors are :func:`low_rank_factors` of ``W``: the
    closest matrix, whatever the inputs. With ``calibration`` (token ids), the decoder
    first reads them, and each block's factors minimise the error on the inputs its
    projections saw, ``||X W.T - X (up @ down).T||``: the SVD of ``W @ R`` with
    ``X.T X = R R.T``, whose factor ``down`` is then multiplied by ``R``'s inverse (a
    whitened SVD; an input direction the text never uses costs nothing to drop).

    Args:
        decoder: an :class:`attnbook.decoder.Decoder`.
        rank: the latent's width, from 1 to ``min(2 * h_kv * d_head, d_model)``.
        calibration: token ids ``(L,)`` or ``(B, L)`` whose inputs the factors fit; or
            what :func:`projection_inputs` returned for them (to fit several ranks from
            one reading); or ``None``.

    Raises:
        TypeError: for a decoder that is not a ``Decoder``, a rank that is not an int, or
            calibration that is not a tensor of ids.
        ValueError: for a rank out of range, or what ``decoder`` refuses as ids.
    """
    if not isinstance(decoder, Decoder):
        raise TypeError(f"decoder must be an attnbook.decoder.Decoder, got "
                        f"{type(decoder).__name__}")
    config = decoder.config
    width = config.num_kv_heads * config.d_head
    rank = require_int("rank", rank, minimum=1, maximum=min(2 * width, config.d_model))
    if calibration is None or isinstance(calibration, Tensor):
        inputs = None if calibration is None else projection_inputs(decoder, calibration)
    elif (isinstance(calibration, list) and len(calibration) == config.num_layers
          and all(isinstance(x, Tensor) and x.dim() == 2 and x.shape[1] == config.d_model
                  for x in calibration)):
        inputs = calibration
    else:
        raise TypeError(f"calibration must be token ids, or one (n, d_model={config.d_model}) "
                        f"tensor per block from projection_inputs, got "
                        f"{type(calibration).__name__}")
    factors = []
    for index, block in enumerate(decoder.blocks):
        stacked = torch.cat([block.attn.k_proj.weight, block.attn.v_proj.weight])  # (2w, d)
        if inputs is None:
            up, down = low_rank_factors(stacked, rank)
        else:
            x = inputs[index].double()  # (n, d_model)
            gram = x.T @ x / x.shape[0]  # (d, d)
            ridge = 1e-6 * gram.diagonal().mean() * torch.eye(gram.shape[0],
                                                             dtype=gram.dtype)
            root = torch.linalg.cholesky(gram + ridge)  # gram = R R.T, R lower
            up, whitened = low_rank_factors(stacked.double() @ root, rank)
            down = torch.linalg.solve_triangular(root, whitened, upper=False,
                                                 left=False)  # whitened @ R^-1
            up, down = up.to(stacked.dtype), down.to(stacked.dtype)
        factors.append((up[:width], up[width:], down))

    def rebuilt(part: int) -> Callable[[int, Tensor, Tensor], Tensor]:
        def replace(index: int, inputs: Tensor, output: Tensor) -> Tensor:
            up = factors[index][part]
            latent = F.linear(inputs, factors[index][2])  # (B, L, rank)
            projection = decoder.blocks[index].attn.k_proj if part == 0 else \
                decoder.blocks[index].attn.v_proj
            return F.linear(latent, up, projection.bias)  # (B, L, h_kv * d_head)
        return replace

    return _replaced_projections(decoder, rebuilt(0), rebuilt(1))


@torch.no_grad()
def projection_inputs(decoder: Decoder, ids: Tensor) -> list[Tensor]:
    """What each block's key and value projections read when ``decoder`` reads ``ids``
    (the normalised residual stream): one ``(B * L, d_model)`` tensor per block.

    Raises:
        TypeError, ValueError: for a decoder that is not a ``Decoder`` and for ids it
            refuses.
    """
    ids = require_tensor("ids", ids)
    seen: list[Tensor] = []

    def record(index: int, inputs: Tensor, output: Tensor) -> Tensor:
        seen.append(inputs.flatten(0, -2))
        return output
    with _replaced_projections(decoder, record, None):
        decoder(ids)
    return seen


class HeavyHitterCache(KVCache):
    """A cache that keeps at most ``budget`` positions per key/value head (H2O).

    When a new token arrives and the cache holds one position too many, each key/value
    head keeps the first ``sinks`` positions, the ``recent`` newest ones (the new token
    included), and, in the rest of its budget, the positions whose keys have received the
    most attention so far, summed over the queries that have attended and over the query
    heads the key/value head serves (Zhang et al., 2023, "heavy hitters"). Different heads
    may keep different positions. A query thus attends over at most ``budget`` keys, its
    own included, as under a window of ``budget`` positions.

    Fill it with a prompt at once (the prompt attends causally, then the cache shrinks to
    its budget) or token by token; after the first call, one token at a time.
    :attr:`positions` gives the positions each head holds, ``(..., h_kv, t)``.

    Args:
        budget: the positions kept per head.
        recent: how many newest positions are always kept, at least 1 (the newest token
            is the one the next steps are most likely to need).
        sinks: how many first positions are always kept.

    Raises:
        TypeError: for arguments that are not ints.
        ValueError: if ``recent`` is below 1, ``sinks`` negative, or ``budget`` smaller
            than ``recent + sinks``.
    """

    def __init__(self, budget: int, *, recent: int, sinks: int = 0) -> None:
        super().__init__()
        self.budget = require_int("budget", budget)
        self.keep_recent = require_int("recent", recent)
        self.sinks = require_int("sinks", sinks, minimum=0)
        if self.budget < self.keep_recent + self.sinks:
            raise ValueError(
                f"budget={self.budget} must hold the recent={self.keep_recent} newest and "
                f"the sinks={self.sinks} first positions it always keeps"
            )
        self._held: Tensor | None = None  # (..., h_kv, t) positions of each head
        self._received: Tensor | None = None  # (..., h_kv, t) attention received so far

    def __repr__(self) -> str:
        return (f"HeavyHitterCache(len={len(self)}, next_position={self.next_position}, "
                f"budget={self.budget}, recent={self.keep_recent}, sinks={self.sinks})")

    @property
    def positions(self) -> Tensor:
        """The positions each key/value head holds, ``(..., h_kv, t)``, increasing."""
        self._require_filled()
        return self._held.clone()

    @property
    def received(self) -> Tensor:
        """The attention each held key has received so far, ``(..., h_kv, t)``."""
        self._require_filled()
        return self._received.clone()

    def append(self, k_new: Tensor, v_new: Tensor) -> None:
        """Add keys ``(..., h_kv, n, E)`` and values ``(..., h_kv, n, Ev)``; ``n = 1``
        after the first call."""
        k_new = require_tensor("k_new", k_new)
        if k_new.dim() < 3:
            raise ValueError(f"k_new must have shape (..., h_kv, n, E), got "
                             f"{tuple(k_new.shape)}")
        if self._held is not None and k_new.shape[-2] != 1:
            raise ValueError(f"a HeavyHitterCache takes one token at a time after its first "
                             f"call, got n={k_new.shape[-2]} (k_new of shape "
                             f"{tuple(k_new.shape)})")
        start = self.next_position
        super().append(k_new, v_new)
        n = k_new.shape[-2]
        new = torch.arange(start, start + n).expand(*k_new.shape[:-2], n)  # (..., h_kv, n)
        fresh = k_new.new_zeros(k_new.shape[:-1], dtype=torch.float32)  # (..., h_kv, n)
        if self._held is None:
            self._held, self._received = new.clone(), fresh
        else:
            self._held = torch.cat([self._held, new], dim=-1)
            self._received = torch.cat([self._received, fresh], dim=-1)
            if len(self) > self.budget:  # one too many: evict before the token attends
                self._evict()

    def attend(self, q: Tensor, *, scale: float | None = None,
               return_weights: bool = False):
        """Attention of the newest queries over every held key, whose weights add to what
        each key has received. Queries ``(..., h, n, E)``. After a prefill longer than the
        budget, the cache then shrinks to it (the weights returned, if asked for, are over
        the keys held before)."""
        out = super().attend(q, scale=scale, return_weights=True)
        weights = out.weights  # (..., h, n, t)
        kv_heads = self._keys.shape[-3]
        per_kv = weights.unflatten(-3, (kv_heads, weights.shape[-3] // kv_heads))
        self._received = self._received + per_kv.sum(dim=(-3, -2)).float()  # (..., h_kv, t)
        if len(self) > self.budget:
            self._evict()
        return out if return_weights else out._replace(weights=None)

    def _evict(self) -> None:
        keep = heavy_hitter_keep(self._received, self._held, self.budget,
                                 recent=self.keep_recent, sinks=self.sinks)  # (..., h_kv, b)
        self._keys = self._keys.gather(-2, keep[..., None].expand(
            *keep.shape, self._keys.shape[-1]))  # (..., h_kv, budget, E)
        self._values = self._values.gather(-2, keep[..., None].expand(
            *keep.shape, self._values.shape[-1]))  # (..., h_kv, budget, Ev)
        self._held = self._held.gather(-1, keep)
        self._received = self._received.gather(-1, keep)
        self._positions = self._positions[:0]  # the base class's one row: heads differ now
        self._length = self.budget


def heavy_hitter_keep(received: Tensor, positions: Tensor, budget: int, *, recent: int,
                      sinks: int = 0) -> Tensor:
    """The heavy-hitter rule (H2O): which of the held positions to keep.

    Kept are the positions below ``sinks``, the ``recent`` newest (``p > newest - recent``,
    the newest being the last position), and, in the rest of the ``budget``, the positions
    that have received the most attention; of two that received the same, the older stays.

    Args:
        received: the attention each held position has received so far, ``(..., t)``.
        positions: the held positions, ``(..., t)`` integers, increasing along the last
            dimension.
        budget, recent, sinks: as in :class:`HeavyHitterCache`.

    Returns:
        The indices along the last dimension to keep, ``(..., min(t, budget))``,
        increasing.

    Raises:
        TypeError, ValueError: for tensors of other shapes or kinds, and what
            :class:`HeavyHitterCache` refuses.
    """
    received, positions = require_tensor("received", received), require_tensor(
        "positions", positions)
    HeavyHitterCache(budget, recent=recent, sinks=sinks)  # the same checks as the cache
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise TypeError(f"positions must hold integers, got {positions.dtype}")
    if received.shape != positions.shape or received.dim() == 0 or received.shape[-1] == 0:
        raise ValueError(f"received and positions must have the same shape (..., t), t >= 1, "
                         f"got {tuple(received.shape)} and {tuple(positions.shape)}")
    newest = positions[..., -1:]  # (..., 1)
    protected = (positions < sinks) | (newest - positions < recent)
    priority = received.double().masked_fill(protected, math.inf)
    order = priority.sort(dim=-1, descending=True, stable=True).indices
    return order[..., :budget].sort(dim=-1).values


def heavy_hitter_mask(scores: Tensor, num_kv_heads: int, budget: int, *, recent: int,
                      sinks: int = 0) -> Tensor:
    """Which keys each query sees when a :class:`HeavyHitterCache` is filled one token at a
    time: the whole decoding loop as one mask, for a text read in one pass.

    Query ``t`` sees the positions its key/value head holds once ``t`` has arrived and,
    if the head held one too many, one has been evicted; its weights are the softmax of
    its ``scores`` over them, and they add to what each held key has received, as in the
    cache.

    Args:
        scores: the causal attention scores ``(..., h, L, L)`` (queries against keys,
            scaled, before the softmax), ``h`` a multiple of ``num_kv_heads``.
        num_kv_heads: the key/value heads; query head ``i`` uses head ``i // (h / h_kv)``.
        budget, recent, sinks: as in :class:`HeavyHitterCache`.

    Returns:
        A boolean mask ``(..., h_kv, L, L)``, ``True`` = may attend, causal, with at most
        ``budget`` keys a row.

    Raises:
        TypeError, ValueError: for scores that are not a square ``(..., h, L, L)`` float
            tensor, heads that do not divide, and what :class:`HeavyHitterCache` refuses.
    """
    scores = require_tensor("scores", scores)
    if not scores.is_floating_point():
        raise TypeError(f"scores must be a floating-point tensor, got {scores.dtype}")
    if scores.dim() < 3 or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(f"scores must have shape (..., h, L, L), got {tuple(scores.shape)}")
    num_kv_heads = require_int("num_kv_heads", num_kv_heads)
    h, L = scores.shape[-3], scores.shape[-1]
    require_divides("num_kv_heads", num_kv_heads, "h", h, " (the heads of scores)")
    HeavyHitterCache(budget, recent=recent, sinks=sinks)  # the same checks as the cache
    grouped = scores.unflatten(-3, (num_kv_heads, h // num_kv_heads))  # (..., h_kv, g, L, L)
    heads = grouped.shape[:-3]  # (..., h_kv)
    held = scores.new_zeros(*heads, 0, dtype=torch.long)  # (..., h_kv, n) positions
    received = scores.new_zeros(*heads, 0, dtype=torch.float32)  # (..., h_kv, n)
    mask = torch.zeros(*heads, L, L, dtype=torch.bool, device=scores.device)
    for t in range(L):
        held = torch.cat([held, held.new_full((*heads, 1), t)], dim=-1)
        received = torch.cat([received, received.new_zeros(*heads, 1)], dim=-1)
        if held.shape[-1] > budget:  # one position too many
            keep = heavy_hitter_keep(received, held, budget, recent=recent, sinks=sinks)
            held, received = held.gather(-1, keep), received.gather(-1, keep)
        mask[..., t, :].scatter_(-1, held, True)
        row = grouped[..., t, :].gather(-1, held[..., None, :].expand(
            *heads, grouped.shape[-3], held.shape[-1]))  # (..., h_kv, g, n)
        received = received + row.softmax(dim=-1).sum(dim=-2).float()
    return mask


@contextlib.contextmanager
def heavy_hitter_kv(decoder: Decoder, budget: int, *, recent: int, sinks: int = 0
                    ) -> Iterator[Decoder]:
    """A context in which ``decoder`` reads a whole text as if every block had a
    :class:`HeavyHitterCache` filled one token at a time: one pass, each attention layer
    masked by :func:`heavy_hitter_mask` of its own scores.

    Raises:
        TypeError, ValueError: for a decoder that is not a ``Decoder``, what
            :class:`HeavyHitterCache` refuses, and (when the model runs) a call with
            caches.
    """
    if not isinstance(decoder, Decoder):
        raise TypeError(f"decoder must be an attnbook.decoder.Decoder, got "
                        f"{type(decoder).__name__}")
    HeavyHitterCache(budget, recent=recent, sinks=sinks)  # the same checks as the cache

    def masked(attn, args, kwargs):
        if kwargs.get("cache") is not None:
            raise ValueError("heavy_hitter_kv is for a whole text in one pass, not for a "
                             "call with caches (use HeavyHitterCache for those)")
        x = args[0]  # (B, L, d_model)
        L = x.shape[1]
        positions = torch.arange(L, device=x.device)
        q = attn.split_heads(attn.q_proj(x))  # (B, h, L, d_head)
        k = attn.split_heads(attn.k_proj(x), attn.num_kv_heads)  # (B, h_kv, L, d_head)
        if attn.position == "rope":
            q, k = rope(q, positions, attn.rope_base), rope(k, positions, attn.rope_base)
        group = attn.num_heads // attn.num_kv_heads
        scores = (q.unflatten(1, (attn.num_kv_heads, group))
                  @ k[:, :, None].transpose(-1, -2)).flatten(1, 2) / math.sqrt(attn.d_head)
        scores = scores.masked_fill(~causal_mask(L, device=x.device), -math.inf)
        kept = heavy_hitter_mask(scores, attn.num_kv_heads, budget, recent=recent,
                                 sinks=sinks).repeat_interleave(group, dim=1)  # (B,h,L,L)
        mask = kwargs.get("mask")
        return args, {**kwargs, "mask": kept if mask is None else kept & mask}

    handles = [block.attn.register_forward_pre_hook(masked, with_kwargs=True)
               for block in decoder.blocks]
    try:
        yield decoder
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def decode_losses(decoder: Decoder, ids: Tensor, caches: list[KVCache] | None = None
                  ) -> Tensor:
    """The loss of every next token of ``ids``, fed to ``decoder`` one token at a time.

    Each token is predicted from what ``caches`` hold after the tokens before it, which
    is how a cache that drops or rounds things is used. With plain caches, the losses
    equal one pass over the whole text (up to float rounding).

    Args:
        decoder: an :class:`attnbook.decoder.Decoder`.
        ids: token ids ``(L,)``, ``L >= 2``.
        caches: one empty cache per block; ``None`` gives full ones.

    Returns:
        ``(L - 1,)``: ``-log p(ids[i + 1] | ids[:i + 1])`` in nats; ``exp`` of its mean is
        the perplexity.

    Raises:
        TypeError, ValueError: for a decoder that is not a ``Decoder``, ids that are not
            a 1-D integer tensor of at least 2 tokens, or caches that are not empty.
    """
    if not isinstance(decoder, Decoder):
        raise TypeError(f"decoder must be an attnbook.decoder.Decoder, got "
                        f"{type(decoder).__name__}")
    ids = require_tensor("ids", ids)
    if ids.dim() != 1 or ids.shape[0] < 2:
        raise ValueError(f"ids must have shape (L,) with L >= 2, got {tuple(ids.shape)}")
    caches = decoder.new_caches() if caches is None else caches
    if not isinstance(caches, list) or not all(isinstance(c, KVCache) for c in caches):
        raise TypeError("caches must be a list of KVCache, one per block")
    if any(len(cache) or cache.next_position for cache in caches):
        raise ValueError("caches must be empty: decode_losses feeds the text from its start")
    losses = []
    for i in range(ids.shape[0] - 1):
        logits = decoder(ids[i:i + 1], caches=caches).logits[0, -1]  # (vocab,)
        losses.append(F.cross_entropy(  # in float32 at least
            logits.to(torch.promote_types(logits.dtype, torch.float32)), ids[i + 1]))
    return torch.stack(losses)

