"""Tests of exercises cache-budget-ex1 and cache-budget-ex3. Run from the repository root:
`.venv/bin/python -m pytest exercises/cache_budget`."""

import torch

from attnbook.checks import check_evict_one, check_quantize_keys

from .solution import evict_one, quantize_keys

# cache-budget-ex1: quantize_keys


def test_quantize_keys_by_hand():
    keys = torch.tensor([[0.0, 10.0], [1.0, 10.0], [2.9, 10.0], [3.0, 10.0]])  # (t, C)
    rounded, nbytes = quantize_keys(keys, 2, 4)
    assert isinstance(rounded, torch.Tensor) and tuple(rounded.shape) == (4, 2), (
        f"rounded has the shape of keys, (4, 2); got {tuple(getattr(rounded, 'shape', ()))}"
    )
    assert rounded[:, 0].tolist() == [0.0, 1.0, 3.0, 3.0], (
        f"channel 0 runs from 0 to 3: 2 bits give the levels 0, 1, 2, 3 (a step of "
        f"(3 - 0) / (2**2 - 1) = 1), and 2.9 rounds to 3; got {rounded[:, 0].tolist()}"
    )
    assert rounded[:, 1].tolist() == [10.0] * 4, (
        f"channel 1 is 10 throughout: its step is 0, and it comes back exactly; got "
        f"{rounded[:, 1].tolist()}"
    )
    assert nbytes == 4 * 2 * 2 // 8 + 2 * 4, (
        f"8 codes of 2 bits pack into 2 bytes, and each of the 2 blocks (one per channel) "
        f"stores a 16-bit minimum and step, 4 bytes: 10 bytes; got {nbytes}"
    )


def test_quantize_keys_bytes_of_smollm2():
    _, nbytes = quantize_keys(torch.randn(512, 192), 2, 128)
    assert nbytes == 27648, (
        f"512 tokens x 192 channels x 2 bits = 24,576 bytes of codes, and 192 channels x "
        f"4 blocks of 128 tokens x 4 bytes = 3,072: 27,648; got {nbytes}"
    )


def test_quantize_keys_against_the_package():
    check_quantize_keys(quantize_keys)


# cache-budget-ex3: evict_one


def test_evict_one_by_hand():
    got = evict_one(torch.tensor([0.9, 0.1, 0.6, 0.2, 0.3, 0.0]), torch.arange(6), 2, 1)
    assert got == 1, (
        f"position 0 is a sink and 4 and 5 are the two newest; of 1, 2 and 3, position 1 "
        f"has received the least (0.1); got {got}"
    )


def test_evict_one_keeps_the_sinks_and_the_newest():
    received = torch.tensor([0.0, 0.5, 0.4, 0.3, 0.2, 0.1])  # the sink has the least
    got = evict_one(received, torch.tensor([0, 2, 3, 5, 8, 9]), 1, 1)
    assert got == 8, (
        f"position 0 is a sink and 9 the newest, kept whatever they received; of the "
        f"others, position 8 has received the least (0.2); got {got}"
    )


def test_evict_one_against_the_package():
    check_evict_one(evict_one)
