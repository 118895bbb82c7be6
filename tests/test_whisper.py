"""attnbook.whisper: the CTranslate2 reader, Whisper tiny.en against transformers' Whisper in
every layer, the cross-attention memory computed once, the shipped clip, DTW, word times."""

from __future__ import annotations

import itertools
import json
import struct
import wave

import numpy as np
import pytest
import torch

from attnbook import whisper as W
from attnbook.layers import MultiHeadAttention

# -- the CTranslate2 reader, on files written here -------------------------------------------


def _string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def _ct2(tensors: dict[str, np.ndarray], aliases: dict[str, str], version: int = 6) -> bytes:
    codes = {np.dtype("<f4"): 0, np.dtype("<i1"): 1, np.dtype("<i2"): 2, np.dtype("<f2"): 4}
    out = struct.pack("<I", version) + _string("TestSpec") + struct.pack("<I", 1)
    out += struct.pack("<I", len(tensors))
    for name, array in tensors.items():
        out += _string(name) + struct.pack("<B", array.ndim)
        out += b"".join(struct.pack("<I", d) for d in array.shape)
        data = array.tobytes()
        out += struct.pack("<BI", codes[array.dtype], len(data)) + data
    out += struct.pack("<I", len(aliases))
    for alias, name in aliases.items():
        out += _string(alias) + _string(name)
    return out


def test_reader_gives_back_every_tensor_with_its_shape_dtype_and_values(tmp_path):
    rng = np.random.default_rng(0)
    written = {"a/weight": rng.standard_normal((3, 4)).astype("<f2"),
               "a/bias": rng.standard_normal(4).astype("<f4"),
               "heads": np.array(6, dtype="<i2"),
               "flag": np.array(1, dtype="<i1")}
    path = tmp_path / "model.bin"
    path.write_bytes(_ct2(written, {"b/weight": "a/weight"}))
    tensors, aliases = W.read_ctranslate2(path)
    assert list(tensors) == list(written)
    for name, array in written.items():
        assert tensors[name].dtype == array.dtype and tensors[name].shape == array.shape
        assert np.array_equal(tensors[name], array)
    assert aliases == {"b/weight": "a/weight"}


@pytest.mark.parametrize("damage", ["truncated", "trailing", "old", "new", "dtype", "size"])
def test_reader_refuses_a_damaged_file_naming_it(tmp_path, damage):
    good = _ct2({"w": np.ones((2, 2), dtype="<f4")}, {})
    data = {"truncated": good[:-9], "trailing": good + b"\0\0",
            "old": struct.pack("<I", 3) + good[4:], "new": struct.pack("<I", 7) + good[4:],
            "size": good.replace(struct.pack("<BI", 0, 16), struct.pack("<BI", 0, 12))[:-4],
            "dtype": good.replace(struct.pack("<BI", 0, 16), struct.pack("<BI", 9, 16))}[damage]
    path = tmp_path / "model.bin"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="path .*model.bin"):
        W.read_ctranslate2(path)


def test_the_shipped_file_splits_into_this_models_parameters():
    tensors, aliases = W.read_ctranslate2(W._model_files()[0] / "model.bin")
    assert aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    # The fused key rows' biases are zero: Whisper's key projections have none.
    fused = tensors["decoder/layer_0/self_attention/linear_0/bias"]
    assert fused.shape == (3 * 384,) and not fused[384:768].any() and fused[:384].any()
    assert not tensors["decoder/layer_0/attention/linear_1/bias"][:384].any()
    model, _ = W.load_whisper()
    state = W._state_from_ctranslate2(tensors, model.config)
    assert sorted(state) == sorted(model.state_dict())


# -- the model against transformers' ---------------------------------------------------------


@pytest.fixture(scope="module")
def clip():
    return W.read_clip()


@pytest.fixture(scope="module")
def runs(clip):
    """Ours and transformers' on the clip and the words it speaks, with every layer kept."""
    model, tokenizer = W.load_whisper()
    audio, words = clip
    ids = tokenizer.prompt + tokenizer.encode(" " + " ".join(w["word"] for w in words))
    full = torch.tensor([ids + [tokenizer.end]])
    mel = W.log_mel(audio)
    kept: dict[str, list[torch.Tensor]] = {"encoder": [], "decoder": []}
    hooks = [block.register_forward_hook(lambda _m, _i, out, side=side: kept[side].append(
        out[0])) for side in kept for block in getattr(model, side)]
    try:
        with torch.no_grad():
            encoded, encoder_maps = model.encode(mel, return_weights=True)
            ours = model.decode(full, model.cross_memory(encoded), return_weights=True)
            theirs = W.reference_whisper()(input_features=mel, decoder_input_ids=full,
                                           output_attentions=True, output_hidden_states=True)
    finally:
        for hook in hooks:
            hook.remove()
    return dict(mel=mel, full=full, encoded=encoded, encoder_maps=encoder_maps, ours=ours,
                theirs=theirs, kept=kept)


#: float32 through 4 + 4 layers: the two models do the same arithmetic in the same order
#: here, but a reader's kernels may not; this is a few hundred times float32's resolution
#: at the logits' scale (about 30).
ATOL = 1e-3


def test_every_encoder_layer_matches_transformers(runs):
    theirs = runs["theirs"]
    # transformers' hidden states: the input to the first layer, then each layer's output
    # (the last one after the final layer norm).
    for index, ours in enumerate(runs["kept"]["encoder"][:-1]):
        torch.testing.assert_close(ours, theirs.encoder_hidden_states[index + 1],
                                   atol=ATOL, rtol=0)
    torch.testing.assert_close(runs["encoded"], theirs.encoder_last_hidden_state,
                               atol=ATOL, rtol=0)
    for ours, their in zip(runs["encoder_maps"], theirs.encoder_attentions, strict=True):
        torch.testing.assert_close(ours, their, atol=1e-5, rtol=0)


def test_every_decoder_layer_and_the_logits_match_transformers(runs):
    theirs, ours = runs["theirs"], runs["ours"]
    for index, hidden in enumerate(runs["kept"]["decoder"][:-1]):
        torch.testing.assert_close(hidden, theirs.decoder_hidden_states[index + 1],
                                   atol=ATOL, rtol=0)
    for mine, their in zip(ours.self_weights, theirs.decoder_attentions, strict=True):
        torch.testing.assert_close(mine, their, atol=1e-5, rtol=0)
    for mine, their in zip(ours.cross_weights, theirs.cross_attentions, strict=True):
        torch.testing.assert_close(mine, their, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.logits, theirs.logits, atol=ATOL, rtol=0)
    # The rows are distributions over the audio positions; no mask hides any of them.
    cross = torch.stack(ours.cross_weights)
    assert cross.shape == (4, 1, 6, runs["full"].shape[1], 1500)
    torch.testing.assert_close(cross.sum(-1), torch.ones(cross.shape[:-1]), atol=1e-5, rtol=0)


def test_decoding_with_the_caches_equals_recomputing(runs):
    model, _ = W.load_whisper()
    memory = model.cross_memory(runs["encoded"])
    caches = model.new_caches()
    full = runs["full"]
    with torch.no_grad():
        steps = [model.decode(full[:, :2], memory, caches=caches).logits]
        steps += [model.decode(full[:, t:t + 1], memory, caches=caches).logits
                  for t in range(2, full.shape[1])]
    assert [len(cache) for cache in caches] == [full.shape[1]] * 4
    torch.testing.assert_close(torch.cat(steps, dim=1), runs["ours"].logits, atol=1e-4, rtol=0)


def test_transcribing_computes_the_cross_keys_and_values_once(clip):
    model, _ = W.load_whisper()
    calls = {"cross": 0, "encoder": 0, "self": 0}
    hooks = [projection.register_forward_hook(
        lambda *_: calls.__setitem__("cross", calls["cross"] + 1))
        for block in model.decoder for projection in (block.cross.k_proj, block.cross.v_proj)]
    hooks.append(model.conv1.register_forward_hook(
        lambda *_: calls.__setitem__("encoder", calls["encoder"] + 1)))
    hooks.append(model.decoder[0].attn.k_proj.register_forward_hook(
        lambda *_: calls.__setitem__("self", calls["self"] + 1)))
    try:
        text, written = W.transcribe(clip[0])
    finally:
        for hook in hooks:
            hook.remove()
    assert calls["encoder"] == 1
    assert calls["cross"] == 8, "one key and one value projection per layer, per clip"
    # Self-attention: the prompt once, then one call per written token and the end token.
    assert calls["self"] == len(written) + 1
    heard = [w.strip(",.'").lower() for w in text.split()]
    said = [w["word"] for w in clip[1]]
    # Words said and heard, in order (longest common subsequence): espeak-ng's isolated
    # words are not all heard right (19 of 23 here), but most are.
    table = np.zeros((len(said) + 1, len(heard) + 1), dtype=int)
    for i, j in itertools.product(range(len(said)), range(len(heard))):
        table[i + 1, j + 1] = table[i, j] + 1 if said[i] == heard[j] else \
            max(table[i, j + 1], table[i + 1, j])
    assert table[-1, -1] >= 16, text


def test_load_is_cached_and_kept_in_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBOOK_CACHE", str(tmp_path))
    W._load.cache_clear()
    try:
        model, tokenizer = W.load_whisper()
        folder = tmp_path / f"whisper-tiny.en-{W._model_files()[1]}"
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors",
                                                            "tokenizer.json"]
        assert W.alignment_heads() == [tuple(p) for p in json.loads(
            (W._model_files()[0] / "config.json").read_text())["alignment_heads"]]
        (folder / "model.safetensors").write_bytes(b"damaged")
        W._load.cache_clear()
        again, _ = W.load_whisper()  # converts again
        for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(),
                                     strict=True):
            assert torch.equal(a, b), name
        assert tokenizer.decode(tokenizer.encode(" every word")) == " every word"
    finally:
        W._load.cache_clear()


# -- the clip ----------------------------------------------------------------------------------


def test_the_shipped_clip_and_its_word_times_agree(clip):
    audio, words = clip
    record = json.loads((W._DATA / "clip_words.json").read_text())
    with wave.open(str(W._DATA / "clip.wav")) as file:
        assert (file.getframerate(), file.getnchannels(), file.getsampwidth()) == (16000, 1, 2)
    assert len(audio) == record["samples"] and 10 <= len(audio) / 16000 <= 20
    assert " ".join(w["word"] for w in words) == record["sentence"]
    starts = np.array([w["start"] for w in words])
    ends = np.array([w["end"] for w in words])
    assert (starts < ends).all() and (ends[:-1] + 0.15 <= starts[1:] + 1e-9).all()
    # Sound inside each word, silence in the pauses (as made_by says).
    for word, nxt in zip(words, words[1:], strict=False):
        inside = audio[round(word["start"] * 16000):round(word["end"] * 16000)]
        pause = audio[round(word["end"] * 16000) + 1:round(nxt["start"] * 16000) - 1]
        assert np.abs(inside).max() > 0.05 and np.abs(pause).max() == 0


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("audio, rate, error, words", [
    (np.zeros(16000, dtype=np.float32), 8000, ValueError, "sample_rate must be 16000"),
    (np.zeros(16000, dtype=np.float32), 16000.0, TypeError, "sample_rate must be an int"),
    (np.zeros((2, 16000), dtype=np.float32), 16000, ValueError, "one channel"),
    (np.zeros(16000, dtype=np.int16), 16000, ValueError, "float samples"),
    (np.zeros(31 * 16000, dtype=np.float32), 16000, ValueError, "30 s"),
    (np.zeros(0, dtype=np.float32), 16000, ValueError, "between 1 sample"),
    ([0.0] * 100, 16000, TypeError, "audio must be a NumPy array"),
])
def test_a_clip_whisper_cannot_hear_is_refused_naming_the_argument(audio, rate, error, words):
    with pytest.raises(error, match=words):
        W.log_mel(audio, rate)


def test_wrong_shapes_and_unknown_heads_are_refused():
    model, _ = W.load_whisper()
    with pytest.raises(ValueError, match=r"mel must have shape \(B, 80, 3000\)"):
        model.encode(torch.zeros(1, 80, 1000))
    memory = [(torch.zeros(1, 6, 10, 64),) * 2] * 4
    with pytest.raises(ValueError, match="ids must be a"):
        model.decode(torch.zeros(1, 3), memory)
    with pytest.raises(ValueError, match="memory must hold one"):
        model.decode(torch.zeros(1, 3, dtype=torch.long), memory[:2])
    with pytest.raises(ValueError, match=r"memory must hold \(keys, values\) of shape"):
        model.decode(torch.zeros(1, 3, dtype=torch.long), [(torch.zeros(1, 6, 10, 32),) * 2] * 4)
    with pytest.raises(ValueError, match="beyond the decoder's 448"):
        model.decode(torch.zeros(1, 449, dtype=torch.long), memory)
    maps = torch.rand(4, 6, 5, 20)
    with pytest.raises(ValueError, match=r"heads names \(4, 0\)"):
        W.alignment_cost(maps, [(4, 0)])
    with pytest.raises(ValueError, match=r"heads names \(1, 6\)"):
        W.alignment_cost(maps, [(0, 0), (1, 6)])
    with pytest.raises(TypeError, match="heads must"):
        W.alignment_cost(maps, [])
    with pytest.raises(ValueError, match="filter_width must be odd"):
        W.alignment_cost(maps, [(0, 0)], filter_width=4)
    with pytest.raises(TypeError, match="words must be"):
        W.word_pieces("two words")


# -- cross-attention with the sound's keys and values computed once --------------------------


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2)])
def test_cross_attend_is_the_layer_attending_from_the_text_to_the_sound(heads, kv_heads):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cross = MultiHeadAttention(16, heads, num_kv_heads=kv_heads)
        sound, text = torch.randn(2, 9, 16), torch.randn(2, 5, 16)
    memory = W.cross_keys_values(cross, sound)
    assert [tuple(t.shape) for t in memory] == [(2, kv_heads, 9, 16 // heads)] * 2
    out, weights = W.cross_attend(cross, text, memory, return_weights=True)
    expected, expected_weights = cross(text, sound)  # the layer's own forward, no mask
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-5)
    # One text position a step gives the same rows: nothing of the sound is masked.
    steps = torch.cat([W.cross_attend(cross, text[:, t:t + 1], memory).output
                       for t in range(5)], dim=1)
    torch.testing.assert_close(steps, out, atol=1e-6, rtol=1e-5)
    assert W.cross_attend(cross, text, memory).weights is None


def test_config_refuses_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="num_heads=5 must divide d_model=384$"):
        W.WhisperConfig(num_heads=5)
    with pytest.raises(TypeError, match="num_heads must be an int, got float"):
        W.WhisperConfig(num_heads=6.0)
    assert W.WhisperConfig(num_heads=8).num_heads == 8


def test_cross_attend_refuses_what_is_not_a_layer_text_or_memory():
    cross = MultiHeadAttention(8, 2)
    memory = W.cross_keys_values(cross, torch.randn(1, 6, 8))
    with pytest.raises(TypeError, match="cross must be an attnbook MultiHeadAttention"):
        W.cross_keys_values(torch.nn.Linear(8, 8), torch.randn(1, 6, 8))
    with pytest.raises(ValueError, match=r"encoded must have shape \(B, A, d_model=8\)"):
        W.cross_keys_values(cross, torch.randn(6, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=8\)"):
        W.cross_attend(cross, torch.randn(1, 3, 4), memory)
    with pytest.raises(ValueError, match=r"memory must be \(keys, values\) of shape"):
        W.cross_attend(cross, torch.randn(2, 3, 8), memory)  # memory of one clip, B = 2
    with pytest.raises(ValueError, match=r"memory must be \(keys, values\)"):
        W.cross_attend(cross, torch.randn(1, 3, 8), memory[:1])


# -- dynamic time warping ------------------------------------------------------------------


def _all_paths(n: int, m: int):
    """Every monotone path from (0, 0) to (n-1, m-1), steps down, right or both."""
    def walk(path):
        i, j = path[-1]
        if (i, j) == (n - 1, m - 1):
            yield path
            return
        for di, dj in ((1, 1), (1, 0), (0, 1)):
            if i + di < n and j + dj < m:
                yield from walk([*path, (i + di, j + dj)])
    yield from walk([(0, 0)])


@pytest.mark.parametrize("seed", range(6))
def test_dtw_finds_the_cheapest_monotone_path(seed):
    rng = np.random.default_rng(seed)
    n, m = rng.integers(1, 5, size=2)
    cost = rng.random((n, m))
    path = W.dtw(cost)
    assert tuple(path[0]) == (0, 0) and tuple(path[-1]) == (n - 1, m - 1)
    steps = {tuple(s) for s in np.diff(path, axis=0)}
    assert steps <= {(1, 0), (0, 1), (1, 1)}
    best = min(sum(cost[i, j] for i, j in p) for p in _all_paths(n, m))
    assert cost[path[:, 0], path[:, 1]].sum() == pytest.approx(best, abs=1e-12)


def test_dtw_follows_a_cheap_diagonal_and_takes_tensors():
    cost = np.ones((4, 8))
    cost[[0, 1, 2, 3], [0, 2, 5, 7]] = 0
    cost[1, 1] = cost[2, 3] = cost[2, 4] = cost[3, 6] = 0.5
    path = W.dtw(torch.from_numpy(cost))
    assert [tuple(p) for p in path] == [(0, 0), (1, 1), (1, 2), (2, 3), (2, 4), (2, 5), (3, 6),
                                        (3, 7)]


def test_dtw_breaks_ties_for_the_diagonal_then_the_step_down():
    assert [tuple(p) for p in W.dtw(np.zeros((2, 2)))] == [(0, 0), (1, 1)]
    assert [tuple(p) for p in W.dtw(np.zeros((3, 2)))] == [(0, 0), (1, 0), (2, 1)]
    assert [tuple(p) for p in W.dtw(np.zeros((2, 3)))] == [(0, 0), (0, 1), (1, 2)]


@pytest.mark.parametrize("cost, error", [([[1.0]], TypeError), (np.zeros(3), ValueError),
                                         (np.zeros((0, 3)), ValueError),
                                         (np.array([[np.nan]]), ValueError)])
def test_dtw_refuses_what_is_not_a_cost_matrix(cost, error):
    with pytest.raises(error, match="cost must"):
        W.dtw(cost)


# -- word times ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clip_maps(clip):
    audio, words = clip
    pieces = W.word_pieces([w["word"] for w in words])
    return W.cross_attention(audio, [i for piece in pieces for i in piece]), pieces


def test_cross_attention_is_the_decoders_weights_on_the_clips_positions(clip, clip_maps,
                                                                        runs):
    """The rows of the prompt, the words and the end of text, over the clip's whole log-mel
    frames halved (17.66 s: 1,766 frames, 883 positions), as Whisper's code keeps them."""
    maps, pieces = clip_maps
    count = sum(map(len, pieces))
    assert maps.shape == (4, 6, 2 + count + 1, len(clip[0]) // 160 // 2) == (4, 6, 26, 883)
    expected = torch.stack(runs["ours"].cross_weights)[:, 0, :, :, :883]
    torch.testing.assert_close(maps, expected, atol=1e-5, rtol=0)  # float32, 8 layers


def _reference_cost(maps: np.ndarray, heads, width: int) -> np.ndarray:
    """Whisper's recipe, written out with NumPy loops: renormalise each row over the
    positions, standardise each position across the rows, running median (reflected
    edges), mean over the heads, negated."""
    out = []
    for layer, head in heads:
        m = maps[layer, head].astype(np.float64)
        m = m / m.sum(axis=1, keepdims=True)
        m = (m - m.mean(axis=0)) / m.std(axis=0)
        half = width // 2
        padded = np.concatenate([m[:, 1:half + 1][:, ::-1], m, m[:, -half - 1:-1][:, ::-1]],
                                axis=1)
        m = np.array([[np.median(padded[r, c:c + width]) for c in range(m.shape[1])]
                      for r in range(m.shape[0])])
        out.append(m)
    return -np.mean(out, axis=0)


@pytest.mark.parametrize("width", [1, 3, 7])
def test_alignment_cost_is_whispers_recipe(width):
    rng = np.random.default_rng(width)
    maps = rng.random((2, 3, 5, 12)) ** 3
    heads = [(1, 0), (0, 2), (1, 2)]
    got = W.alignment_cost(torch.from_numpy(maps), heads, filter_width=width)
    np.testing.assert_allclose(got.numpy(), _reference_cost(maps, heads, width), atol=1e-12)
    # Renormalised: a row scaled by any constant (attention lost to the padding) gives
    # the same cost.
    scaled = maps * rng.uniform(0.1, 1.0, size=(2, 3, 5, 1))
    np.testing.assert_allclose(
        W.alignment_cost(torch.from_numpy(scaled), heads, filter_width=width).numpy(),
        got.numpy(), atol=1e-9)


def test_word_times_from_the_alignment_heads_beat_layer_0(clip, clip_maps):
    maps, pieces = clip_maps
    truth = np.array([w["start"] for w in clip[1]])
    found = W.word_times(maps, pieces)
    assert found.shape == (len(pieces), 2)
    assert (np.diff(found[:, 0]) >= 0).all() and (found[:, 1] >= found[:, 0]).all()
    assert np.array_equal(found[1:, 0], found[:-1, 1])  # exact: one word ends, the next starts
    error = np.abs(found[:, 0] - truth).mean()
    # 0.14 s here: within a third of a second on average, and far better than layer 0's.
    assert error < 0.3
    layer0 = np.abs(W.word_times(maps, pieces, [(0, h) for h in range(6)])[:, 0] - truth)
    assert layer0.mean() > 4 * error


def test_word_times_refuses_maps_of_another_text(clip_maps):
    maps, pieces = clip_maps
    with pytest.raises(ValueError, match="maps must have 27 rows"):
        W.word_times(maps, [*pieces, [50256]])
    with pytest.raises(ValueError, match=r"heads names \(0, 6\)"):
        W.word_times(maps, pieces, [(0, 6)])


def test_word_times_reads_the_rows_that_predict():
    """Row r of a synthetic map attends to positions 10 r to 10 r + 9 alone. The first text
    token is predicted by row 1 (the prompt's last token), so word i starts at 10 (i + 1);
    reading the input rows (one late) would give 10 (i + 2)."""
    count, positions = 6, 100
    rows = 2 + count + 1
    maps = torch.full((4, 6, rows, positions), 1e-4)
    for r in range(rows):
        maps[:, :, r, 10 * r:10 * r + 10] = 1.0
    maps = maps / maps.sum(-1, keepdim=True)
    found = W.word_times(maps, [[7]] * count, [(3, 0)])
    # Word 0 starts where the path does, at position 0; the others where their row does.
    expected = np.array([0] + [10 * (i + 1) for i in range(1, count)]) / 50
    assert np.array_equal(found[:, 0], expected)  # exact: positions over 50


def test_the_rows_that_predict_a_word_start_one_before_its_tokens():
    # The chapter's prompt of two tokens: row 1 (its last) predicts the first word.
    assert W.predicting_rows(2, [[400], [500, 501], [600]]) == [[1], [2, 3], [4]]
    assert W.predicting_rows(1, [[7, 8, 9]]) == [[0, 1, 2]]
    assert W.predicting_rows(3, []) == []
    with pytest.raises(ValueError, match="prompt_length must be"):
        W.predicting_rows(0, [[1]])
    with pytest.raises(ValueError, match="at least one per word"):
        W.predicting_rows(2, [[1], []])
    with pytest.raises(TypeError, match="pieces must be a list"):
        W.predicting_rows(2, "two words")
    with pytest.raises(TypeError, match="one list of token ids a word"):
        W.predicting_rows(2, [1, 2])
