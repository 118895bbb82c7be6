"""An IPython startup file: every clock a chapter times with returns scrambled readings.

Each reading advances the clock by a random step between 1 microsecond and 1 second, so any
measured duration is a random number unrelated to the work. A chapter that executes without
error under it neither asserts a timing relation nor breaks when its timings come out the
other way round; whatever comparison words it glues, it computes from the measurement.

The steps are drawn from a generator seeded by ``ATTNBOOK_CLOCK_SEED``, so a run can be
repeated exactly. With ``ATTNBOOK_CLOCK_MIRROR=1`` each step is mirrored, 10**-6 / step: the
same draws, in reverse order of size. Two runs of a chapter, one plain and one mirrored, that
read the clock at the same points then see any two one-step durations ordered both ways, so a
verdict that one of them is the shorter fails in one run, whatever the seed (a random pair alone
lets it through half the time). A minimum over rounds, a sum of steps or a median of an even
count is not always reversed; for those the pair of runs is no weaker than one random run.
"""

import os
import random
import time
import timeit

_draw = random.Random(int(os.environ.get("ATTNBOOK_CLOCK_SEED", "20261125")))
_mirror = os.environ.get("ATTNBOOK_CLOCK_MIRROR") == "1"


def _step():
    """A step between 1 microsecond and 1 second, log-uniform (mirrored if asked)."""
    exponent = _draw.uniform(-6, 0)
    return 10 ** (-6 - exponent if _mirror else exponent)


def _scrambled(clock, scale=1.0):
    reading = [clock()]

    def read():
        reading[0] += scale * _step()
        return type(reading[0])(reading[0])

    return read


for _name in ("perf_counter", "process_time", "thread_time"):
    setattr(time, _name, _scrambled(getattr(time, _name)))
for _name in ("perf_counter_ns", "process_time_ns", "thread_time_ns"):
    _ns = _scrambled(getattr(time, _name), scale=1e9)
    setattr(time, _name, lambda _ns=_ns: int(_ns()))
timeit.default_timer = time.perf_counter
