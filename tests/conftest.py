"""Session-wide test settings.

TRITON_INTERPRET=1 runs the Triton kernels in Triton's interpreter on CPU tensors (how they
are tested without a GPU). Triton reads it when a kernel is decorated, i.e. when
`regattn.mappings._triton` is first imported, which may happen in any test module (a
backend test, torch.compile's inductor): so it is set here, before any test module imports
anything. On a GPU machine, `TRITON_INTERPRET=0 pytest` runs the CUDA tests instead (the
interpreter tests then skip themselves).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
