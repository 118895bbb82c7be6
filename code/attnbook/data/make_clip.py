"""Make ``clip.wav`` and ``clip_words.json``: a sentence spoken one word at a time.

The book never runs this script: its output is kept in the repository, and the build reads
that. It needs espeak-ng (Debian: ``apt-get install espeak-ng``), which says each word on its
own; the words are trimmed of the synthesiser's silence, resampled to Whisper's 16 kHz and
joined with pauses of known length. So every word's start and end in the clip are known by
construction, to the sample, and the book can measure how far the times it reads from
Whisper's cross-attention are from the truth.

    python code/attnbook/data/make_clip.py
"""

from __future__ import annotations

import io
import json
import subprocess
import wave
from pathlib import Path

import numpy as np

SENTENCE = ("every word the model writes looks back at the sound and the heads that "
            "listen best tell us when each word was spoken")
RATE = 16_000
#: Silence before the first word and after the last, and the shortest and longest pause
#: between two words (seconds); the pauses are drawn once from a seeded generator.
EDGE, PAUSES, SEED = 0.5, (0.15, 0.45), 20261130
#: A word starts at its first sample louder than this share of its loudest sample.
THRESHOLD = 0.02
VOICE, WORDS_PER_MINUTE = "en-us", 150
HERE = Path(__file__).resolve().parent


def speak(word: str) -> tuple[np.ndarray, int]:
    """espeak-ng's recording of ``word``: samples in [-1, 1] and their rate."""
    wav = subprocess.run(["espeak-ng", "-v", VOICE, "-s", str(WORDS_PER_MINUTE), "--stdout",
                          word], check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as file:
        rate = file.getframerate()
        samples = np.frombuffer(file.readframes(file.getnframes()), dtype="<i2")
    return samples.astype(np.float64) / 32768, rate


def trimmed(samples: np.ndarray) -> np.ndarray:
    """``samples`` from the first to the last sample above the threshold."""
    loud = np.flatnonzero(np.abs(samples) > THRESHOLD * np.abs(samples).max())
    return samples[loud[0]:loud[-1] + 1]


def resampled(samples: np.ndarray, rate: int) -> np.ndarray:
    """``samples`` at ``RATE`` Hz, by keeping the frequencies below the new Nyquist."""
    length = round(len(samples) * RATE / rate)
    spectrum = np.fft.rfft(samples)[:length // 2 + 1]
    return np.fft.irfft(spectrum, length) * length / len(samples)


def main() -> None:
    rng = np.random.default_rng(SEED)
    pieces = [np.zeros(round(EDGE * RATE))]
    position = len(pieces[0])
    words = []
    for index, word in enumerate(SENTENCE.split()):
        if index:
            pause = np.zeros(round(rng.uniform(*PAUSES) * RATE))
            pieces.append(pause)
            position += len(pause)
        samples, rate = speak(word)
        sound = resampled(trimmed(samples), rate)
        words.append({"word": word, "start": position / RATE,
                      "end": (position + len(sound)) / RATE})
        pieces.append(sound)
        position += len(sound)
    pieces.append(np.zeros(round(EDGE * RATE)))
    clip = np.concatenate(pieces)
    clip = np.round(clip / np.abs(clip).max() * 0.9 * 32767).astype("<i2")
    with wave.open(str(HERE / "clip.wav"), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(RATE)
        file.writeframes(clip.tobytes())
    version = subprocess.run(["espeak-ng", "--version"], check=True, capture_output=True,
                             text=True).stdout.split("Data at")[0].strip()
    record = {"sentence": SENTENCE, "sample_rate": RATE, "samples": len(clip),
              "made_by": f"{version}, voice {VOICE}, {WORDS_PER_MINUTE} words a minute, "
                         "one word at a time (code/attnbook/data/make_clip.py)",
              "words": words}
    (HERE / "clip_words.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"{len(words)} words, {len(clip) / RATE:.2f} s")


if __name__ == "__main__":
    main()
