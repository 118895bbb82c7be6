"""IPython startup for the ``many-threads`` environment: sixteen intra-op threads.

PyTorch reads ``OMP_NUM_THREADS`` but caps it at the number of cores, so on a 2-core machine
the variable alone still gives 2 threads. ``torch.set_num_threads`` is not capped.
"""

import torch

torch.set_num_threads(16)
assert torch.get_num_threads() == 16, torch.get_num_threads()
