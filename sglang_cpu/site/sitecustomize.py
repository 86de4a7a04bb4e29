"""Loaded through PYTHONPATH in SGLang's processes (tests and example only): applies the CPU shims."""

import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _root not in sys.path:
    sys.path.append(_root)

from sglang_cpu import shims  # noqa: E402

shims.apply()
