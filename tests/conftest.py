"""The suite runs on the CPU wherever it runs.

Its digests compare runs of different worker counts, and on a host with a GPU `shoal run`
would put a one-worker run on the GPU and a three-worker run on the CPU (a GPU per worker or
none), whose bits never agree; torchrun's workers would each want a GPU of their own. Hiding
the GPUs here, before any worker starts, makes `make test` mean the same on a GPU host as on
CI. The CUDA paths are checked on a GPU by hand (docs/consistency.md); tests of the device
choice fake CUDA themselves.
"""

import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""
