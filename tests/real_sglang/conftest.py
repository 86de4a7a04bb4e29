"""Shared set-up for tests that run SGLang's real classes in this process (CPU only)."""

import pytest


@pytest.fixture(scope="session")
def sglang_runtime():
    """CPU shims + SGLang's process-wide runtime (gloo world, published ServerArgs), once.

    Imported lazily: collecting this directory must not import SGLang (some tests here
    check what happens when SGLang is imported later, in subprocesses)."""
    import torch

    # The models are tiny: one intra-op thread is fastest, and on a loaded 2-core machine
    # more threads spin against each other (measured: whole file 52 s -> 30 s).
    torch.set_num_threads(1)
    from sglang_cpu import shims

    shims.apply()
    from sglang_cpu import runtime

    runtime.init_runtime()
    return runtime
