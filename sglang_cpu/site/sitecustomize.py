"""Loaded through PYTHONPATH in SGLang's processes (tests and example only): applies the CPU shims.

With SGLANG_CPU_SPEC=1 in the environment it also applies the speculative shims of `sglang_cpu.spec_shims` (EAGLE-3,
and through it `sglang_cpu.dflash_shims` for DFLASH drafts) and sets TRITON_INTERPRET=1 before anything imports Triton. With SGLANG_CPU_TP=1
it applies `sglang_cpu.tp_shims` (pynccl off, for --tp-size 2), and with SGLANG_CPU_PERTURB_AUX="RANK:SLOT:SCALE"
the test-only aux perturbation, registered here so that it wraps DeepseekV2Model.forward before the probe does.
With SGLANG_CPU_DP_ATTENTION=1 it applies `sglang_cpu.dp_shims` (DP attention's CPU branches).
SGLANG_CPU_REPLAY_EMULATION=1: sglang_cpu.replay_emulation (CUDA-graph replay as Python sees it).
SGLANG_CPU_PROBE_BOTH_VALUES=1: the probe takes values at the inner forward as well as at the EAGLE worker.
SGLANG_CPU_PROBE_FAULTS and SGLANG_CPU_PROBE_STATE_DIR: see the end of this file.
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

if os.environ.get("SGLANG_CPU_TP", "") == "1" or os.environ.get("SGLANG_CPU_PERTURB_AUX", ""):
    from sglang_cpu import tp_shims  # noqa: E402

    if tp_shims.enabled():
        tp_shims.apply()
    tp_shims.apply_perturbation()

if os.environ.get("SGLANG_CPU_DP_ATTENTION", "") == "1":
    from sglang_cpu import dp_shims  # noqa: E402

    dp_shims.apply()  # test-only: DP attention's CPU branches (see sglang_cpu/dp_shims.py)

if os.environ.get("SGLANG_CPU_SHIFT_VERIFY_AUX", ""):
    from sglang_cpu import verify_faults  # noqa: E402

    verify_faults.apply()  # test-only: verify forwards' aux states shifted by one row while a flag file exists

if os.environ.get("SGLANG_CPU_REPLAY_EMULATION", "") == "1":
    from sglang_cpu import replay_emulation  # noqa: E402

    replay_emulation.apply()  # test-only: inner models get an instance forward below every class wrapper

if os.environ.get("SGLANG_CPU_PROBE_BOTH_VALUES", "") == "1":
    from eagle_probe.runtime.values import boundary as _probe_boundary  # noqa: E402

    _probe_boundary.KEEP_INNER_VALUES[0] = True  # test-only: values from the inner forward and the worker both

from sglang_cpu import census  # noqa: E402

census.start()

# Test-only faults in the probe's own functions (SGLANG_CPU_PROBE_FAULTS, sglang_cpu.probe_faults) and the
# probe-state report (SGLANG_CPU_PROBE_STATE_DIR, sglang_cpu.probe_state). The probe's modules are importable
# here; its bootstrap installs it after this file has run.
if os.environ.get("SGLANG_CPU_PROBE_FAULTS", ""):
    from sglang_cpu import probe_faults  # noqa: E402

    probe_faults.apply()

if os.environ.get("SGLANG_CPU_PROBE_STATE_DIR", ""):
    from sglang_cpu import probe_state  # noqa: E402

    probe_state.start()
