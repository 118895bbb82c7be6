"""An IPython startup file: every clock a chapter times with returns scrambled readings.

Each reading advances the clock by a random step between 1 microsecond and 1 second, so any
measured duration is a random number unrelated to the work. A chapter that executes without
error under it neither asserts a timing relation nor breaks when its timings come out the
other way round; whatever comparison words it glues, it computes from the measurement.
"""

import random
import time
import timeit

_draw = random.Random(20261125)


def _scrambled(clock, scale=1.0):
    reading = [clock()]

    def read():
        reading[0] += scale * 10 ** _draw.uniform(-6, 0)
        return type(reading[0])(reading[0])

    return read


for _name in ("perf_counter", "process_time", "thread_time"):
    setattr(time, _name, _scrambled(getattr(time, _name)))
for _name in ("perf_counter_ns", "process_time_ns", "thread_time_ns"):
    _ns = _scrambled(getattr(time, _name), scale=1e9)
    setattr(time, _name, lambda _ns=_ns: int(_ns()))
timeit.default_timer = time.perf_counter
