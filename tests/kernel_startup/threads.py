"""IPython startup for the thread-count environments (``four-threads``, ``many-threads``).

PyTorch reads ``OMP_NUM_THREADS`` but caps it at the number of cores, so on a 2-core machine
the variable alone still gives 2 threads. ``torch.set_num_threads`` is not capped: this sets
the count the environment names, whatever the machine.
"""

import os

import torch

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"]), torch.get_num_threads()
