"""An IPython startup file: every clock a chapter times with gives readings unrelated to the
work, or worse, in reverse order of the work.

With ``ATTNBOOK_CLOCK_REVERSE=1`` (the ``reversed-clock`` environment, the one the suite
runs) each reading advances the clock by 1 + 1 / (d + 10**-6) seconds, where d is the real time
in seconds since the clock's previous reading: the longer the real wait, the shorter the step,
and a wait k times as long (under a second) reads about k times as short. Any one-step
duration comes out in reverse order of the real ones, so a verdict that holds on the build
machine ("the cached step is the faster one", "at least twice as fast") fails here, whatever
the machine. A step is never under a second, so a loop that runs until a time budget is spent
stops; for the same reason a lower bound under a second ("it took more than 1 ms") is not
caught. A minimum, median or maximum over rounds is reversed too when every round of one is
shorter than every round of the other; a duration with more readings inside it is not always.

Otherwise each reading advances the clock by a random step between 1 microsecond and 1
second, drawn from a generator seeded by ``ATTNBOOK_CLOCK_SEED`` (``scrambled-clock``), so
any measured duration is a random number unrelated to the work; with
``ATTNBOOK_CLOCK_MIRROR=1`` each step is mirrored, 10**-6 / step (``mirrored-clock``): the
same draws, in reverse order of size.

A chapter that executes without error under them neither asserts a timing relation nor
breaks when its timings come out the other way round; whatever comparison words it glues, it
computes from the measurement.
"""

import os
import random
import time
import timeit

_draw = random.Random(int(os.environ.get("ATTNBOOK_CLOCK_SEED", "20261125")))
_mirror = os.environ.get("ATTNBOOK_CLOCK_MIRROR") == "1"
_reverse = os.environ.get("ATTNBOOK_CLOCK_REVERSE") == "1"


def _step():
    """A step between 1 microsecond and 1 second, log-uniform (mirrored if asked)."""
    exponent = _draw.uniform(-6, 0)
    return 10 ** (-6 - exponent if _mirror else exponent)


def _reversed_step(real_seconds):
    """At least a second, shorter the longer the real time since the last reading."""
    return 1.0 + 1.0 / (max(real_seconds, 0.0) + 1e-6)


def _scrambled(clock, scale=1.0):
    """``clock`` (in seconds, or nanoseconds with ``scale=1e9``), scrambled or reversed."""
    real = [clock()]
    reading = [0.0]  # from zero: float steps stay resolvable however long the machine is up

    def read():
        if _reverse:
            now = clock()
            reading[0] += scale * _reversed_step((now - real[0]) / scale)
            real[0] = now
        else:
            reading[0] += scale * _step()
        return reading[0]

    return read


_real_perf_counter = time.perf_counter
for _name in ("perf_counter", "process_time", "thread_time"):
    setattr(time, _name, _scrambled(getattr(time, _name)))
for _name in ("perf_counter_ns", "process_time_ns", "thread_time_ns"):
    _ns = _scrambled(getattr(time, _name), scale=1e9)
    setattr(time, _name, lambda _ns=_ns: int(_ns()))
# timeit bound the real clock as a default argument when it was imported: rebind it.
timeit.default_timer = time.perf_counter
for _function in (timeit.Timer.__init__, timeit.timeit, timeit.repeat):
    _function.__defaults__ = tuple(time.perf_counter if value is _real_perf_counter else value
                                   for value in _function.__defaults__)
