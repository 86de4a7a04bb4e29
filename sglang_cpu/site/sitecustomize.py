"""Loaded through PYTHONPATH in SGLang's processes (tests and example only): applies the CPU shims.

With SGLANG_CPU_SPEC=1 in the environment it also applies the speculative (EAGLE-3) shims of
`sglang_cpu.spec_shims` and sets TRITON_INTERPRET=1 before anything imports Triton.
"""

import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _root not in sys.path:
    sys.path.append(_root)

from sglang_cpu import shims  # noqa: E402

shims.apply()

if os.environ.get("SGLANG_CPU_SPEC", "") == "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from sglang_cpu import spec_shims  # noqa: E402

    spec_shims.apply()

from sglang_cpu import census  # noqa: E402

census.start()
