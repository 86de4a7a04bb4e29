"""The step timer reading SGLang's own device timer (SGLANG_ENABLE_METRICS_DEVICE_TIMER=1) instead of adding events:
SGLang 0.5.23's real DeviceTimer, its DeviceTimer.wrap wrapped by the installed probe. Its events come from
torch.get_device_module(), here a host stand-in whose query() the test controls (no CUDA on this machine); the
timer's own logic (intervals in order, read once query() is true, reporters called with t in seconds) is SGLang's.
tests/gpu/test_phase_timing.py runs the same on CUDA events."""

import time
from types import SimpleNamespace

import pytest
import wrapt

import eagle_probe
from eagle_probe.runtime.integrations import statement
from eagle_probe.runtime.state import STATE
from eagle_probe.runtime.timing.clocks import CUDA_EVENTS, SGLANG_DEVICE_TIMER, WALL_CLOCK, choose_clock
from eagle_probe.runtime.timing.steps import PHASE_MARKS, StepTimer

pytestmark = pytest.mark.real_sglang


class HostEvent:
    done = True  # the device has finished everything recorded so far (the test holds it back)

    def __init__(self, enable_timing=False):
        self.at = None

    def record(self):
        self.at = time.perf_counter()

    def query(self):
        return HostEvent.done

    def elapsed_time(self, end):
        return (end.at - self.at) * 1000.0


@pytest.fixture
def host_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "get_device_module", lambda *a: SimpleNamespace(Event=HostEvent))
    monkeypatch.setattr(HostEvent, "done", True)
    return HostEvent


def _install(tmp_path, timing="on"):
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0",
                                    "EAGLE_PROBE_PHASE_TIMING": timing})


@pytest.fixture
def probe(tmp_path):
    _install(tmp_path)
    yield
    eagle_probe.uninstall()


def _forward(timer, category, seconds):
    with timer.wrap(metadata={"category": category}):
        time.sleep(seconds)


def _step(step_timer, device_timer, phases):
    step = step_timer.begin(4)
    for phase, category, seconds in phases:
        first, last = PHASE_MARKS[phase]
        step_timer.phase(first)
        _forward(device_timer, category, seconds)
        step_timer.phase(last)
    step_timer.end(step, 2)


def test_phases_are_sglangs_own_intervals_read_once_reported(probe, host_device):
    from sglang.srt.utils.device_timer import DeviceTimer

    assert isinstance(DeviceTimer.__dict__["wrap"], wrapt.FunctionWrapper)
    reported = []
    device_timer = DeviceTimer(reporter=lambda **kw: reported.append(kw))
    _forward(device_timer, "extend", 0.001)  # the prefill before the first decode step
    clock = choose_clock(True, device_timer)
    assert clock.source == SGLANG_DEVICE_TIMER
    timer = StepTimer(clock)
    phases = [("draft", "eagle_draft", 0.02), ("verify", "target_verify", 0.04), ("extend", "eagle_draft_extend", 0.01)]
    _step(timer, device_timer, phases)  # the first step of a shape is left out (once-only work)
    timer.interrupt()
    host_device.done = False  # the device is behind: nothing can be read
    _step(timer, device_timer, phases)
    assert timer.snapshot()["steps"] == {}  # not read, and not waited for
    assert len(reported) == 4  # the prefill and the first step's three
    host_device.done = True
    _forward(device_timer, "extend", 0.001)  # SGLang reads its intervals at the end of its next one
    assert [r["category"] for r in reported[4:]] == ["eagle_draft", "target_verify", "eagle_draft_extend", "extend"]
    [row] = timer.snapshot()["steps"]["4-7"].values()
    steps, batch, draft, verify, extend, total = row[:6]
    by_category = {r["category"]: r["t"] for r in reported[4:7]}
    assert (steps, batch) == (1, 4)
    assert (draft, verify, extend) == (by_category["eagle_draft"], by_category["target_verify"],
                                       by_category["eagle_draft_extend"])  # SGLang's own numbers, as it reported
    assert total == pytest.approx(draft + verify + extend)  # device time: the forwards, not the host between
    assert 0.04 <= verify < 0.2 and 0.02 <= draft < verify


@pytest.fixture
def worker_module(probe):
    """The EAGLE worker's module, imported (its step wrapped) before torch's device module is stood in for."""
    import sglang.srt.speculative.eagle_worker_v2 as module

    return module


def test_the_statement_and_costs_name_the_device_timer(probe, worker_module, host_device):
    from sglang.srt.utils.device_timer import DeviceTimer

    device_timer = DeviceTimer(reporter=lambda **kw: None)
    _forward(device_timer, "extend", 0.0)
    runner = SimpleNamespace(device_timer=device_timer)
    worker = SimpleNamespace(device="cuda:0", topk=1, _target_worker=SimpleNamespace(model_runner=runner))
    costs = STATE.recorder.costs
    assert costs.timer_for(worker).clock.source == SGLANG_DEVICE_TIMER == costs.source
    assert statement._timing(SimpleNamespace(device="cuda:0", device_timer=device_timer)) == SGLANG_DEVICE_TIMER
    assert statement._timing(SimpleNamespace(device="cuda:0", device_timer=None)) == CUDA_EVENTS
    assert statement._timing(SimpleNamespace(device="cpu", device_timer=None)) == WALL_CLOCK


def test_a_timer_first_seen_without_the_probe_keeps_cuda_events(probe, host_device):
    """A timer whose intervals the probe did not number from the first (made and used before the probe, or a
    release without add_reporter) is not read: the worker falls back to its own events."""
    from sglang.srt.utils.device_timer import DeviceTimer

    before = DeviceTimer(reporter=lambda **kw: None)
    assert choose_clock(True, before).source != SGLANG_DEVICE_TIMER  # no interval numbered yet
    no_reporters = SimpleNamespace()  # 0.5.8-0.5.11: one reporter, no add_reporter
    assert choose_clock(True, no_reporters).source != SGLANG_DEVICE_TIMER


def test_timing_off_adds_no_reporter(tmp_path, host_device):
    from sglang.srt.utils.device_timer import DeviceTimer

    _install(tmp_path, timing="off")
    try:
        device_timer = DeviceTimer(reporter=lambda **kw: None)
        _forward(device_timer, "decode", 0.0)
        assert len(device_timer._reporters) == 1  # SGLang's only
        assert choose_clock(True, device_timer).source != SGLANG_DEVICE_TIMER
    finally:
        eagle_probe.uninstall()
