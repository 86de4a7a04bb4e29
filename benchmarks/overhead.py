"""Added time per target forward, draft forward and verify step: SGLang's real classes, with and without the probe.

Run:  .venv/bin/python benchmarks/overhead.py [--rounds 30] [--block 20] [--json] [--check] [--keep-logs]

Both variants run in this one process, interleaved in blocks (uninstall / install between blocks), on the
same prepared batches, so drift on the machine hits both alike. Two figures per forward mode:
- end to end: median forward time with the probe minus without (noisy: the forward itself takes ms on a CPU);
- probe work (hot): the wrapper around a function that returns the real forward's result at once, on the
  real module and batch, minus calling that function directly: the probe's own cost with warm caches;
- probe work (in situ): the probe's step after the forward timed inside real forwards, minus the same timer around
  an empty function at the same spot, both (and the reference call there) interleaved in rounds of one block of
  forwards each; per variant the best block median, the statistic of the reference (timeit's best of repeats):
  on a shared VM the other blocks carry other processes' interference. The forward evicts the CPU caches, so this
  is the cold-cache cost. The median over all forwards is printed beside it (context: it moved 2x between runs).
Fingerprints: one sampled fingerprint per slot count, width and token count (3 x 7168 as DeepSeek-V3 at 8 and 512
tokens), bf16 and float32 (best of 7 block medians, as in situ; the best of 3 such rounds a second apart): the
forward's thread's part (queue: the reductions and the copy to host memory), amortised over the forwards of one
sampling interval, and the flush thread's (read).
Draft forward and verify step (acceptance path): the wrapper around a function returning at once, with real
SGLang objects (llama_eagle3.LlamaModel and a ForwardBatch carrying an EagleDraftInput; Req, ScheduleBatch and
GenerationBatchResult; the verify hook's owner is a stand-in for the Scheduler, with its server_args'
speculative_num_steps), probe active against the bare call, median per call: the probe's own added time. The
verify step is every part's hot-path work: the acceptance queue and the acceptance-by-slice queue (one append each,
with the step's own list of its requests). The slices' per-request bucketing runs off the hot path; its cost per
verify step at each batch is printed for context (`slice_count_us`, no budget: the flush thread's work).
The verify step again with vocabulary coverage sampled on every step (a server samples one step per
EAGLE_PROBE_COVERAGE_INTERVAL_S, 0.1 s): the hook returns 3 committed tokens a request, as SGLang's resolver does,
and the draft's hot vocabulary is 32 000 of 128 256 ids; what sampling adds to a verify step, paired (the same probed
step with its sample due and not, interleaved), the figure amortised with the fingerprints; beside it, the flush
thread's count of one sampled step of the largest batch (context, no budget).
Decode step: the two other hooks every decode step runs on every path, CUDA graphs included, hot, per call:
ModelRunner.forward's (forward counts and path) and the EAGLE worker's hand-off after verify (worker boundary live,
no fingerprint due); then every hook of one decode step summed (SPEC_STEPS speculative steps), under CUDA graphs and
eager, beside its share of a 10 ms GPU step. The fingerprint figure is the worker boundary's sample as well: it queues
the same reductions on the aux states the target hands the worker.
Block draft hand-off: the DFlash worker's hook where the target's states go into the draft's projection (once after
a prefill and after every verify, on every path), hot, per call, no fingerprint due; the worker a stand-in holding
the target model and the draft's fc (not in the decode step's sum, which is EAGLE-3's).
Phase timing: what timing one decode step adds (the step, draft, verify and extend wrappers, the target's verify
forward timed on the wall clock, the step queued), hot, per step (in the decode step's sum). The step is counted on
the flush thread; the worker counts only when 512 items wait (steps, periods, forwards: about 3 a step), i.e. past
some 170 steps a second, which the median leaves out.
Flush: one flush of everything counted (the probe's own thread, once per flush interval).
Load: eagle_probe.install() with SGLang's model registry imported, i.e. the registry scan and the wrapping
of every target class found (best of 5, in ms; budget 50 ms per process, absolute: it happens once).

Reference, measured in the same run: one call through a wrapt pass-through decorator whose wrapper does
one dict increment (timeit, best of 7 x 200 000; the bare call is printed beside it for context). Every probe figure
is printed in us and as a multiple of the reference, beside its budget (BUDGETS: multiples, held on any machine)
and PASS or OVER. --json adds the reference, the multiples, the budgets and the names over budget; --check exits 1
when any figure is over its budget. For context only (no budget): the same reference call timed in situ, at the
spot where the probe's in-situ step runs (`in_situ_reference_us`), and the in-situ figure as a multiple of it: the
warm reference does not scale the cost of cold caches, which depends on the machine's memory more than its CPU.
"""

import argparse
import atexit
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sglang_cpu import shims  # noqa: E402

shims.apply()

import eagle_probe  # noqa: E402
from eagle_probe.runtime.integrations.target_forward import model_forward_wrapper  # noqa: E402

VERIFY_BATCHES = (1, 16, 64, 128)

# The budgets, as multiples of the reference (one wrapt pass-through call plus one dict increment), in one place.
BUDGETS = {
    "target_forward_hot": 3.0,  # per target forward, each mode
    "target_forward_in_situ": 10.0,  # per target forward inside real forwards, each mode
    "draft_forward": 3.0,  # the same kind of per-call wrapper as the target forward, hot
    "verify_step": 8.0,  # per verify step at every batch in VERIFY_BATCHES: must not grow with the batch
    "fingerprint_amortised": 0.5,  # one sample's cost spread over FORWARDS_PER_S forwards
    "fingerprint_and_coverage_amortised": 0.5,  # with the coverage samples of one second, per forward
    "flush": 25.0,  # once per flush interval (1 s), off the hot path; / FORWARDS_PER_S = 0.5x
    "verify_step_coverage": 8.0,  # a verify step whose tokens are sampled for coverage, as verify_step
    "phase_timing": 10.0,  # per decode step: the step, its three phases and the target's verify forward timed
    "block_feed": 4.0,  # per block draft hand-off (one a verify): a wrapper, a set lookup and one clock read
}
REFERENCE_NUMBER, REFERENCE_REPEAT = 200_000, 7


def reference_call():
    """The reference: an empty function behind a wrapt pass-through decorator whose wrapper does one dict increment."""
    import wrapt

    counts = {}
    key = ("target", "DECODE", "eager", "false")

    @wrapt.decorator
    def pass_through(wrapped, instance, args, kwargs):
        counts[key] = counts.get(key, 0) + 1
        return wrapped(*args, **kwargs)

    def empty():
        return None

    return pass_through(empty), empty


def reference_us():
    """(reference, bare call) in us: one call through a wrapt pass-through decorator whose wrapper does one dict
    increment, and a bare call of the same empty function; timeit, best of REFERENCE_REPEAT x REFERENCE_NUMBER."""
    wrapped, empty = reference_call()

    def best(call):
        return min(timeit.repeat(call, number=REFERENCE_NUMBER, repeat=REFERENCE_REPEAT)) / REFERENCE_NUMBER * 1e6

    return best(wrapped), best(empty)


def judged(name, us, reference):
    """(multiple of the reference, budget multiple, verdict) for one figure."""
    multiple = us / reference
    budget = BUDGETS[name]
    return multiple, budget, "PASS" if multiple <= budget else "OVER"


def prepare(runner):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    full = CaptureHiddenMode.FULL
    runner.reset()
    batches = {}
    runner.extend([[5, 9, 17, 33, 2, 71, 8], [3, 4, 5, 6]], capture_hidden_mode=full)
    batches["EXTEND"] = runner.last_forward_batch
    runner.decode([11, 12], capture_hidden_mode=full)
    batches["DECODE"] = runner.last_forward_batch
    runner.target_verify([[12, 40, 41, 42], [11, 50, 51, 52]])
    batches["TARGET_VERIFY"] = runner.last_forward_batch
    return batches


def time_block(runner, batch, n):
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        runner._run(batch)  # init attention metadata + the model's real outer forward
        out.append(time.perf_counter_ns() - start)
    return out


def inner_forward_result(runner, batch):
    """The real DeepseekV2Model.forward result for this batch (call with the probe uninstalled)."""
    import torch
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    runner.attn_backend.init_forward_metadata(batch)
    with torch.no_grad(), forward_context(ForwardContext(attn_backend=runner.attn_backend), forward_batch=batch):
        return runner.model.model.forward(batch.input_ids, batch.positions, batch)


@contextlib.contextmanager
def worker_boundary_live():
    """As on every EAGLE-3 server: the EAGLE worker takes the values, the inner forward only counts and checks."""
    from eagle_probe.runtime.values import boundary

    live, boundary.LIVE[0] = boundary.LIVE[0], True
    try:
        yield
    finally:
        boundary.LIVE[0] = live


def probe_work(inner, batch, result, n):
    """Wrapper cost alone: same instance, args and result as the real inner forward, the worker boundary live (as
    on every EAGLE-3 server: the inner forward then takes no values)."""
    with worker_boundary_live():
        return _probe_work(inner, (batch.input_ids, batch.positions, batch), result, n)


def _probe_work(inner, args, result, n):

    def returns_result(*a, **k):
        return result

    direct, wrapped = [], []
    for _ in range(n):
        start = time.perf_counter_ns()
        returns_result(*args)
        direct.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        model_forward_wrapper(returns_result, inner, args, {})
        wrapped.append(time.perf_counter_ns() - start)
    return statistics.median(wrapped) - statistics.median(direct)


def in_situ(runner, batch, rounds, block):
    """The probe's step after the forward timed inside real forwards (the wrapper looks it up at call time), and at
    the same spot the reference call and an empty call: `rounds` rounds, each one block of `block` forwards per
    variant in turn, in an order that turns each round (after two settling forwards), so machine drift and the
    position in a round hit all three alike. Per variant the best (lowest) block median, as timeit's best of repeats
    for the reference: higher blocks are other processes' interference (up to 2x between runs on a shared 2-core VM),
    not the probe's cost. The empty call is timed at the same cold spot, so its cost (the timer's own) is subtracted
    like for like. The worker boundary is live, as on every EAGLE-3 server (the EAGLE worker takes the values; the
    inner forward only counts and checks its signature). Returns (probe, reference, empty, probe's median over all
    its forwards minus the empty's, for context), in ns."""
    from eagle_probe.runtime.integrations import target_forward as wrappers

    after = wrappers._after_forward
    reference, empty = reference_call()

    def reference_after(*args):
        reference()

    def timed(step_after, n):
        spent = []

        def timed_after(*args):
            start = time.perf_counter_ns()
            step_after(*args)
            spent.append(time.perf_counter_ns() - start)

        wrappers._after_forward = timed_after
        try:
            time_block(runner, batch, n)
        finally:
            wrappers._after_forward = after
        return spent

    variants = {"probe": after, "reference": reference_after, "empty": lambda *args: None}
    medians = {name: [] for name in variants}
    samples = {name: [] for name in variants}
    names = list(variants)
    with worker_boundary_live():
        for round_index in range(rounds):
            # The order turns each round, so every variant runs as often first, second and third: the first block of
            # a round ran measurably slower (the same steps in two variants measured 14.8 and 10.3 us when one always
            # ran first), a bias against whichever variant always leads.
            turn = round_index % len(names)
            for name in names[turn:] + names[:turn]:
                timed(variants[name], 2)  # settle: the first forward after a switch runs the new step cold
                spent = timed(variants[name], block)
                medians[name].append(statistics.median(spent))
                samples[name] += spent
    best = {name: min(values) for name, values in medians.items()}
    context = statistics.median(samples["probe"]) - statistics.median(samples["empty"])
    return best["probe"] - best["empty"], best["reference"] - best["empty"], best["empty"], context


FLUSH_EVERY = 100  # verify steps between two counts of the probe's queues (a server's flush thread: every second)


def drain_counts():
    """What a server's flush thread does every second, outside the timed calls: count the verify steps the hot path
    queued. Without it (no flush thread runs in this process) the queues pass their bound and the hot path counts
    each step itself, which no server does."""
    from eagle_probe.runtime.state import STATE

    recorder = STATE.recorder
    if recorder is not None:
        recorder.acceptance.snapshot()
        recorder.slices.count_queued()


SITU_PASSES = 5  # whole in-situ measurements, a second apart: the best of each figure is kept (the reference: 7)


def passes_of(measure, passes, pause_s=1.0):
    """measure() `passes` times, a pause apart, for the caller to keep each figure's best (timeit's statistic, as the
    reference's): on this VM the probe's figures ran for seconds at a time in a slower state (in situ up by 20-40 %,
    the verify step at batch 128 4.1 and 7.6 us in runs minutes apart, a fingerprint 11.5 and 17.5 us in alternate
    calls) while the reference, a pure-Python call on warm memory, stayed at 0.58 us."""
    results = []
    for index in range(passes):
        if index:
            time.sleep(pause_s)
        results.append(measure())
    return results


def acceptance_passes(runner, target_config, n, passes=SITU_PASSES):
    """draft_and_acceptance()'s rows, each the best of `passes` passes."""
    runs = passes_of(lambda: draft_and_acceptance(runner, target_config, n), passes)
    return [(row[0][0], row[0][1], min(us for _, _, us in row)) for row in zip(*runs)]  # the same rows each pass


def in_situ_passes(runner, batch, rounds, block, passes=SITU_PASSES):
    """in_situ()'s figures, each the best of `passes` passes."""
    return tuple(map(min, zip(*passes_of(lambda: in_situ(runner, batch, rounds, block), passes))))


def paired_median_ns(call_bare, call_probed, n, between=drain_counts):
    bare, probed = [], []
    for index in range(n):
        if index % FLUSH_EVERY == 0:
            between()
        start = time.perf_counter_ns()
        call_bare()
        bare.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        call_probed()
        probed.append(time.perf_counter_ns() - start)
    return statistics.median(bare), statistics.median(probed)


def draft_and_acceptance(runner, target_config, n):
    """Median added microseconds for the draft-forward wrapper and the acceptance wrapper (per verify step)."""
    from array import array
    from types import SimpleNamespace

    import torch
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.models.llama_eagle3 import LlamaModel
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from transformers import LlamaConfig

    from eagle_probe.runtime.integrations.acceptance import wrapper_for
    from eagle_probe.runtime.integrations.llama_eagle3 import draft_forward_wrapper
    from sglang_cpu.draft_models import eagle3_draft_config

    rows = []
    draft = LlamaModel(LlamaConfig(**eagle3_draft_config(target_config)))
    batch = prepare(runner)["DECODE"]
    batch.spec_info = EagleDraftInput(hidden_states=torch.zeros(batch.batch_size, 3 * target_config.hidden_size))
    args = (batch.input_ids, batch.positions, batch)

    def returns(*a, **k):
        return None

    bare, probed = paired_median_ns(lambda: returns(*args), lambda: draft_forward_wrapper(returns, draft, args, {}), n)
    rows.append(("draft forward", 0, (probed - bare) / 1000))
    resolve_spec_v2_tokens_wrapper = wrapper_for("SchedulerBatchResultProcessor._resolve_spec_v2_tokens")
    # In a server the hook's `self` is the Scheduler, whose server_args name the speculative steps (the wrapper reads
    # them once); with no owner it would work them out from the result on every step, which no server does.
    scheduler = SimpleNamespace(server_args=SimpleNamespace(speculative_num_steps=2))
    for batch_size in VERIFY_BATCHES:
        reqs = [Req(f"r{i}", "", array("i", [1, 2, 3]), SamplingParams(max_new_tokens=64)) for i in range(batch_size)]
        schedule_batch = ScheduleBatch(reqs=reqs)
        result = GenerationBatchResult()
        result.num_correct_drafts_per_req_cpu = [i % 3 for i in range(batch_size)]
        result.speculative_num_draft_tokens = 3
        step = (result, schedule_batch)
        bare, probed = paired_median_ns(lambda: returns(*step),
                                        lambda: resolve_spec_v2_tokens_wrapper(returns, scheduler, step, {}), n)
        rows.append(("verify step", batch_size, (probed - bare) / 1000))
    rows += coverage_sampled(resolve_spec_v2_tokens_wrapper, scheduler, n)
    return rows


NEVER = float("inf")
COVERAGE_VOCAB, COVERAGE_HOT = 128256, 32000  # Llama-3's vocabulary, SpecForge's default hot vocabulary


def coverage_sampled(wrapper, scheduler, n):
    """The verify step with vocabulary coverage sampled on every step (the hook returns each request's committed
    tokens, 3 a request, as SGLang's resolver does): the sampled step's added time; and the flush thread's count of
    one sampled step at the largest batch."""
    from array import array

    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.sampling.sampling_params import SamplingParams

    from eagle_probe.analysis.vocab_coverage import in_vocab_table
    from eagle_probe.runtime.state import STATE

    coverage = STATE.recorder.coverage
    hot = tuple(range(0, 4 * COVERAGE_HOT, 4))
    coverage.set_vocabulary(hot, in_vocab_table(COVERAGE_VOCAB, hot))
    coverage.interval = 1e-9  # every step is due: the cost of a sampled step
    rows = []
    for batch_size in VERIFY_BATCHES:
        reqs = [Req(f"r{i}", "", array("i", [1, 2, 3]), SamplingParams(max_new_tokens=64)) for i in range(batch_size)]
        result = GenerationBatchResult()
        result.num_correct_drafts_per_req_cpu = [i % 3 for i in range(batch_size)]
        result.speculative_num_draft_tokens = 3
        step = (result, ScheduleBatch(reqs=reqs))
        tokens = [[7 * i, 7 * i + 1, 7 * i + 2] for i in range(batch_size)]

        def returns_tokens(*a, **k):
            return tokens

        coverage.count()
        before = coverage.samples
        bare, probed = paired_median_ns(lambda: returns_tokens(*step),
                                        lambda: wrapper(returns_tokens, scheduler, step, {}), n)
        coverage.count()
        if coverage.samples - before < n:  # a clock reading repeated: some steps were plain ones
            raise SystemExit(f"verify+coverage at batch {batch_size}: {coverage.samples - before} of {n} steps "
                             f"sampled; the figure would not be a sampled step's")
        rows.append(("verify+coverage", batch_size, (probed - bare) / 1000))

        # What sampling adds, paired: the same probed step with its sample due and not, interleaved (both set
        # next_due first, so that write costs both alike); a difference of the two rows' medians, taken in separate
        # loops, carries their drift (0.07 to 0.36 us between runs for a 0.1 us difference)
        def plain():
            coverage.next_due = NEVER
            wrapper(returns_tokens, scheduler, step, {})

        def sampled():
            coverage.next_due = 0.0
            wrapper(returns_tokens, scheduler, step, {})

        plain_ns, sampled_ns = paired_median_ns(plain, sampled, n)
        coverage.count()
        rows.append(("coverage extra", batch_size, (sampled_ns - plain_ns) / 1000))
    times = []
    for _ in range(200):
        coverage.sample_lists(0.0, tokens)
        start = time.perf_counter_ns()
        coverage.count()
        times.append(time.perf_counter_ns() - start)
    rows.append(("coverage count", VERIFY_BATCHES[-1], statistics.median(times) / 1000))
    coverage.interval = 0.1
    coverage.next_due = NEVER  # as before its vocabulary was set: the next pass's plain steps sample nothing
    return rows


def slice_count_cost_us(n):
    """{batch: µs} the slices' bucketing costs per verify step off the hot path (the flush thread counts what the
    hot path queued), with real Req objects that stay in the batch as in decoding, median of 5 runs of n steps."""
    from array import array

    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    from eagle_probe.observations import VerifyStep
    from eagle_probe.runtime.state import STATE

    counter = STATE.recorder.slices
    counter.count_queued()  # what the timed verify steps left queued
    out = {}
    for batch_size in VERIFY_BATCHES:
        reqs = [Req(f"s{i}", "", array("i", [1, 2, 3]), SamplingParams(max_new_tokens=64)) for i in range(batch_size)]
        step = VerifyStep([i % 3 for i in range(batch_size)], 2, "benchmark", reqs, batch_size, False)
        times = []
        for _ in range(5):
            for _ in range(n):
                counter.add(step)
            start = time.perf_counter_ns()
            counter.count_queued()
            times.append((time.perf_counter_ns() - start) / n)
        out[str(batch_size)] = round(statistics.median(times) / 1000, 2)
    return out


def flush_cost_us(n):
    """One flush of everything counted (forwards, draft forwards, a verify step's acceptance), median µs: the work
    moved off the hot path, done every flush interval by the probe's background thread."""
    from eagle_probe.observations import VerifyStep
    from eagle_probe.runtime.state import STATE

    recorder = STATE.recorder
    times = []
    for i in range(n):
        recorder.counts.cell(("target", "EXTEND", "eager", "false"))[0] += 1  # as a repeated target forward counts
        recorder.counts.cell(("target", "DECODE", "eager", "false"))[0] += 1
        recorder.draft_repeated(("DECODE", "eager", "skipped"))
        recorder.acceptance.add(VerifyStep([i % 3, 2, 1, 0], 2, "benchmark"))
        start = time.perf_counter_ns()
        recorder.flush_metrics()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


SPEC_STEPS = 3  # speculative_num_steps of the decode step summed below (a common EAGLE-3 setting: 3 steps, topk 1)
GPU_STEP_US = 10_000.0  # a decode step on a GPU: the share printed for the probe's whole cost of one


def step_hooks_us(runner, model, n):
    """Hot added us per call of the two other hooks every decode step runs on every path, CUDA graphs included:
    ModelRunner.forward's (forward counts and path; the model runner is a stand-in holding what the wrapper reads, the
    batch SGLang's real ForwardBatch) and the EAGLE worker's hand-off after verify (`_draft_extend_for_decode`, with
    the worker boundary live and no fingerprint due: the common step; real ScheduleBatch, GenerationBatchResult and
    LogitsProcessorOutput, the worker a stand-in that leads to the real target model)."""
    from array import array
    from types import SimpleNamespace

    import torch
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams

    from eagle_probe.runtime.integrations import eagle_worker, runner_paths

    def returns(*a, **k):
        return None

    runner_paths._statement[0] = True  # the start-up statement: once per process, not per forward
    forward_batch = prepare(runner)["TARGET_VERIFY"]
    model_runner = SimpleNamespace(is_draft_worker=False)
    bare, probed = paired_median_ns(lambda: returns(forward_batch),
                                    lambda: runner_paths.model_runner_forward_wrapper(returns, model_runner,
                                                                                      (forward_batch,), {}), n)
    runner_forward = (probed - bare) / 1000
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model)))
    reqs = [Req(f"w{i}", "", array("i", [1, 2, 3]), SamplingParams(max_new_tokens=64)) for i in range(16)]
    batch = ScheduleBatch(reqs=reqs)
    batch.forward_mode = ForwardMode.DECODE
    result = GenerationBatchResult()
    result.logits_output = LogitsProcessorOutput(next_token_logits=None,
                                                 hidden_states=torch.zeros(4 * len(reqs), 3 * model.config.hidden_size))
    args = (batch, result)
    return runner_forward, not_due_added_us(lambda: returns(*args),
                                            lambda: eagle_worker.decode_wrapper(returns, worker, args, {}), n,
                                            "the worker hand-off hook")


def not_due_added_us(bare, probed, n, hook):
    """Added us of `probed` over `bare` (paired medians) with the worker boundary live and no fingerprint due: the
    hand-off every other step of an interval makes. Exits where `hook` counted internal errors (the figure would not
    be its path's)."""
    from eagle_probe.runtime.state import STATE
    from eagle_probe.runtime.values import boundary

    sampler = STATE.recorder.fingerprints
    with worker_boundary_live():
        try:
            if sampler is not None:
                sampler.due_cell(boundary.WORKER)[0] = NEVER
            errors = STATE.recorder.out.errors_total
            bare_ns, probed_ns = paired_median_ns(bare, probed, n)
            if STATE.recorder.out.errors_total != errors:
                raise SystemExit(f"{hook} counted internal errors: the figure would not be its path's")
        finally:
            if sampler is not None:
                sampler.due_cell(boundary.WORKER)[0] = 0.0
    return (probed_ns - bare_ns) / 1000


def block_feed_us(model, n, batch=16, block=4):
    """Hot added us per call of the block draft's hand-off hook
    (DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc, once after a prefill and once after every verify, on
    every path), with no fingerprint due: the common step. The
    target is this benchmark's real model (its three capture slots), the worker a stand-in holding what the wrapper
    reads (the target model, the draft's fc and width); a verify of `batch` requests, `block` rows each."""
    from types import SimpleNamespace

    import torch

    from eagle_probe.runtime.integrations import block_drafts

    def returns(*a, **k):
        return None

    hidden = model.config.hidden_size
    slots = len(model.model.layers_to_capture)
    draft = SimpleNamespace(fc=torch.nn.Linear(slots * hidden, hidden, bias=False), num_context_features=slots,
                            config=SimpleNamespace(hidden_size=hidden, num_hidden_layers=2))
    worker = SimpleNamespace(model_runner=SimpleNamespace(model=model), draft_model=draft)
    rows = batch * block
    kwargs = dict(target_hidden=torch.zeros(rows, slots * hidden), cache_loc=torch.arange(rows),
                  positions=torch.arange(rows), commit_lens=torch.full((batch,), block))
    return not_due_added_us(lambda: returns(**kwargs), lambda: block_drafts.feed_wrapper(returns, worker, (), kwargs),
                            n, "the block draft's hand-off hook")


def phase_timing_us(runner, n):
    """Hot added us per decode step of the phase timing (EAGLE_PROBE_PHASE_TIMING, on by default): the worker's step
    wrapper with its draft and verify wrappers and the draft extend's timed phase inside it, and the target's verify
    forward timed inside the verify (ModelRunner.forward's wrapper with timing against the same wrapper without), the
    wall clock's marks and the step queued at its end (counted on the flush thread); against the same nesting of bare
    calls. Real ScheduleBatch
    and ForwardBatch; the worker is a stand-in holding what the wrappers read (device, topk, speculative_num_steps)."""
    from array import array
    from types import SimpleNamespace

    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams

    from eagle_probe.runtime.integrations import phase_timing
    from eagle_probe.runtime.state import STATE

    def returns(*a, **k):
        return None

    forward_batch = prepare(runner)["TARGET_VERIFY"]
    worker = SimpleNamespace(device="cpu", topk=1, speculative_num_steps=SPEC_STEPS)
    batch = ScheduleBatch(reqs=[Req(f"p{i}", "", array("i", [1, 2, 3]), SamplingParams(max_new_tokens=64))
                                for i in range(16)])
    batch.forward_mode = ForwardMode.DECODE

    def verify_probed(*a, **k):
        mark = phase_timing.forward_begin(worker, forward_batch)
        phase_timing.forward_end(mark)

    def step_probed(*a, **k):
        phase_timing.draft_wrapper(returns, worker, (batch,), {})
        phase_timing.verify_wrapper(verify_probed, worker, (batch,), {})
        phase_timing.timed_phase("extend", returns, (batch, None), {})

    def step_bare():
        returns(batch)
        returns(batch)
        returns(batch, None)

    errors = STATE.recorder.out.errors_total
    bare, probed = paired_median_ns(step_bare, lambda: phase_timing.step_wrapper(step_probed, worker, (batch,), {}), n)
    if STATE.recorder.out.errors_total != errors or STATE.recorder.costs.timer is None:
        raise SystemExit("the phase timing counted internal errors or timed nothing: the figure would not be its "
                         "path's")
    return (probed - bare) / 1000


def decode_step_rows(figures):
    """[(batch, graph path us, eager path us)]: every hook one decode step runs, summed. Under CUDA graphs (the
    deployed path): the acceptance hook, the worker hand-off, ModelRunner.forward once for the target's verify and
    SPEC_STEPS + 1 times for the draft (its steps and its extend), and the fingerprints amortised per forward. Eager
    adds the target's inner forward (in situ) and the draft's forward wrapper per draft forward."""
    runner_forwards = 1 + SPEC_STEPS + 1
    rows = []
    for batch, verify in figures["verify_step_us"].items():
        graph = (verify + figures["worker_handoff_us"] + runner_forwards * figures["runner_forward_us"]
                 + figures["fingerprint_amortised_us"] + figures["phase_timing_us"])
        eager = (graph + figures["target_forward_in_situ_us"]["TARGET_VERIFY"]
                 + (SPEC_STEPS + 1) * figures["draft_forward_us"])
        rows.append((batch, round(graph, 2), round(eager, 2)))
    return rows


FINGERPRINT_SHAPES = ((3, 7168, 8), (3, 7168, 512), (3, 64, 8))  # slots, width, tokens (DeepSeek-V3, the tiny model)
FORWARDS_PER_S = 50  # a busy rank's target forwards per second, for the amortised figure
COVERAGE_SAMPLES_PER_S = 10  # sampled verify steps a second at the default EAGLE_PROBE_COVERAGE_INTERVAL_S (0.1 s)


def fingerprint_cost_us(budget_s=0.1, repeat=REFERENCE_REPEAT):
    """One sampled fingerprint, us per shape and dtype: ({shape: queue}, {shape: read}). queue() is the forward's
    thread's part (the reductions on the aux states' device and the copy to host memory), read() the flush thread's
    (the per-slot figures and the signature from the host copy). Each the best of `repeat` block medians (3 to 20
    samples, about budget_s, per block), as the in-situ figure; a median, not a mean, since a loaded 2-core machine
    stalls torch's CPU thread pool for milliseconds now and then (not the probe's cost, and no thread pool runs
    these reductions on a GPU). At the default interval (1 s) one forward in FORWARDS_PER_S pays the queue:
    amortised = queue / FORWARDS_PER_S."""
    import torch

    from eagle_probe.runtime.values.fingerprint import Fingerprinter

    queued, read = {}, {}
    for slots, width, tokens in FINGERPRINT_SHAPES:
        for dtype in (torch.bfloat16, torch.float32):
            states = torch.randn(tokens, slots * width).to(dtype)
            fingerprinter = Fingerprinter(slots, width, states.device)

            start = time.perf_counter_ns()
            fingerprinter.queue(states).read()  # the first sample makes the device's constants and the projection
            number = max(3, min(20, int(budget_s * 1e9 / max(time.perf_counter_ns() - start, 1))))
            queue_blocks, read_blocks = [], []
            for _ in range(repeat):
                queue_times, read_times = [], []
                for _ in range(number):
                    start = time.perf_counter_ns()
                    pending = fingerprinter.queue(states)
                    middle = time.perf_counter_ns()
                    pending.read()
                    queue_times.append(middle - start)
                    read_times.append(time.perf_counter_ns() - middle)
                queue_blocks.append(statistics.median(queue_times))
                read_blocks.append(statistics.median(read_times))
            key = f"{slots}x{width}x{tokens}_{str(dtype).replace('torch.', '')}"
            queued[key] = round(min(queue_blocks) / 1000, 1)
            read[key] = round(min(read_blocks) / 1000, 1)
    return queued, read


FINGERPRINT_ROUNDS = 3  # whole measurements, a second apart, fresh tensors each: the best per shape is kept


def fingerprint_rounds(rounds=FINGERPRINT_ROUNDS):
    """fingerprint_cost_us()'s (queue, read) per shape, each the best of `rounds` passes (fresh tensors each)."""
    runs = passes_of(fingerprint_cost_us, rounds)
    return tuple({key: min(run[part][key] for run in runs) for key in runs[0][part]} for part in (0, 1))


LOAD_BUDGET_MS = 50.0  # the registry scan and wrapping at load time, per process (absolute: once)


_TEMP_DIRS = []  # the probe's log directories of this run, removed at exit unless --keep-logs


def temp_dir(prefix: str) -> str:
    path = tempfile.mkdtemp(prefix=prefix)
    _TEMP_DIRS.append(path)
    return path


def remove_temp_dirs():
    for path in _TEMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)


def load_cost_ms(cycles=5):
    """eagle_probe.install() with SGLang's model registry imported (every model module SGLang imports here, as a
    server has when it loads its model): scanning the registry's classes and wrapping every target found. Best of
    `cycles` uninstall/install pairs; (ms, registry classes, targets wrapped)."""
    import sglang.srt.models.registry as registry

    costs, wrapped = [], 0
    for _ in range(cycles):
        eagle_probe.uninstall()
        start = time.perf_counter()
        eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": temp_dir("eagle-probe-load-")})
        costs.append((time.perf_counter() - start) * 1000)
        wrapped = len(eagle_probe.patched_targets())
    eagle_probe.uninstall()
    return min(costs), len(registry.ModelRegistry.models), wrapped


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--situ-rounds", type=int, default=20, help="in-situ rounds (one block per variant each)")
    parser.add_argument("--situ-block", type=int, default=10, help="forwards per in-situ block")
    parser.add_argument("--json", action="store_true", help="print one JSON object of the figures as the last line")
    parser.add_argument("--check", action="store_true", help="exit 1 when a figure is over its budget")
    parser.add_argument("--keep-logs", action="store_true", help="keep the probe's log directories (else removed "
                        "at exit)")
    args = parser.parse_args()
    if not args.keep_logs:
        atexit.register(remove_temp_dirs)

    from sglang_cpu.runtime import TinyBatchRunner, build_deepseek, init_runtime
    from sglang_cpu.tiny_models import deepseek_v3_config

    init_runtime()
    model = build_deepseek(deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=0)
    model.set_eagle3_layers_to_capture([1, 3, 4])
    runner = TinyBatchRunner(model, max_tokens=4096)
    log_dir = temp_dir("eagle-probe-bench-")
    probe_env = {"EAGLE_PROBE_LOG_DIR": log_dir}  # default settings otherwise
    figures = {"target_forward_hot_us": {}, "target_forward_in_situ_us": {}, "target_forward_added_us": {},
               "target_forward_ratio": {}, "verify_step_us": {}, "in_situ_reference_us": {},
               "target_forward_in_situ_median_us": {}}

    reference, bare = reference_us()
    figures["reference_us"], figures["bare_call_us"] = round(reference, 3), round(bare, 3)
    print(f"reference: one wrapt pass-through call + one dict increment {reference:.3f} us (bare call {bare:.3f} us; "
          f"timeit, best of {REFERENCE_REPEAT} x {REFERENCE_NUMBER})")
    print(f"sglang tiny DeepSeek-V3 (6 layers, hidden {model.config.hidden_size}), CPU, "
          f"{args.rounds} rounds x {args.block} forwards per variant and mode, interleaved")
    print(f"{'mode':<14}{'without us':>12}{'with us':>12}{'added us':>11}{'ratio':>8}"
          f"{'probe hot us':>14}{'in situ us':>12}{'timer base us':>15}{'median us':>11}")
    for mode in ("EXTEND", "DECODE", "TARGET_VERIFY"):
        eagle_probe.uninstall()
        batch = prepare(runner)[mode]
        samples = {False: [], True: []}
        for round_index in range(args.rounds):
            for with_probe in ((False, True) if round_index % 2 == 0 else (True, False)):
                if with_probe:
                    eagle_probe.install(env=probe_env)
                else:
                    eagle_probe.uninstall()
                time_block(runner, batch, 2)  # settle after the switch
                samples[with_probe] += time_block(runner, batch, args.block)
        result = inner_forward_result(runner, batch)
        eagle_probe.install(env=probe_env)
        work_us = probe_work(model.model, batch, result, 2000) / 1000
        situ, situ_reference, base, situ_median = in_situ_passes(runner, batch, args.situ_rounds, args.situ_block)
        eagle_probe.uninstall()
        without = statistics.median(samples[False]) / 1000
        with_ = statistics.median(samples[True]) / 1000
        print(f"{mode:<14}{without:>12.1f}{with_:>12.1f}{with_ - without:>11.1f}{with_ / without:>8.3f}"
              f"{work_us:>14.2f}{situ / 1000:>12.2f}{base / 1000:>15.2f}{situ_median / 1000:>11.2f}")
        figures["target_forward_hot_us"][mode] = round(work_us, 2)
        figures["target_forward_in_situ_us"][mode] = round(situ / 1000, 2)
        figures["in_situ_reference_us"][mode] = round(situ_reference / 1000, 2)
        figures["target_forward_in_situ_median_us"][mode] = round(situ_median / 1000, 2)
        figures["target_forward_added_us"][mode] = round(with_ - without, 1)
        figures["target_forward_ratio"][mode] = round(with_ / without, 4)
    eagle_probe.install(env=probe_env)
    print(f"\n{'probe path':<16}{'batch':>7}{'added us (hot)':>16}")
    for name, batch_size, added in acceptance_passes(runner, model.config, 3000):
        print(f"{name:<16}{batch_size or '-':>7}{added:>16.2f}")
        if name == "draft forward":
            figures["draft_forward_us"] = round(added, 2)
        elif name == "verify step":
            figures["verify_step_us"][str(batch_size)] = round(added, 2)
        elif name == "verify+coverage":
            figures.setdefault("verify_step_coverage_us", {})[str(batch_size)] = round(added, 2)
        elif name == "coverage extra":
            figures.setdefault("coverage_sample_extra_us", {})[str(batch_size)] = round(added, 2)
        else:
            figures["coverage_count_us"] = round(added, 2)  # the flush thread's, per sampled step (context)
    figures["flush_us"] = round(flush_cost_us(500), 2)
    print(f"flush of everything counted: {figures['flush_us']:.2f} us (every flush interval, off the hot path)")
    figures["slice_count_us"] = slice_count_cost_us(500)
    print("acceptance by slice, bucketing per verify step off the hot path (no budget): " + ", ".join(
        f"batch {b}: {us:.2f} us" for b, us in figures["slice_count_us"].items()))
    figures["fingerprint_us"], figures["fingerprint_read_us"] = fingerprint_rounds()
    tiny = figures["fingerprint_us"]["3x64x8_float32"]  # the model this benchmark runs
    figures["fingerprint_amortised_us"] = round(tiny / FORWARDS_PER_S, 2)
    # A coverage sample's extra cost (a sampled verify step against a plain one, paired, at the largest batch), paid
    # once per EAGLE_PROBE_COVERAGE_INTERVAL_S (0.1 s: 10 a second), spread over the same FORWARDS_PER_S forwards.
    extra = max(figures["coverage_sample_extra_us"][str(VERIFY_BATCHES[-1])], 0.0)
    together = (tiny + extra * COVERAGE_SAMPLES_PER_S) / FORWARDS_PER_S
    figures["fingerprint_and_coverage_amortised_us"] = round(together, 2)
    print(f"\n{'fingerprint (slots x width x tokens, dtype)':<46}{'queue us':>10}{'read us':>10}")
    for shape, cost in figures["fingerprint_us"].items():
        print(f"{shape:<46}{cost:>10.1f}{figures['fingerprint_read_us'][shape]:>10.1f}")
    print(f"queue: the forward's thread, once per sample; read: the flush thread's (context, no budget). Amortised at "
          f"the default 1 s interval and {FORWARDS_PER_S} forwards/s: {figures['fingerprint_amortised_us']:.2f} us per "
          f"forward for this benchmark's model (3 x 64); any shape: its queue above / {FORWARDS_PER_S} (on a GPU the "
          f"reductions are a few memory passes over the aux states)")
    figures["runner_forward_us"], figures["worker_handoff_us"] = (round(v, 2) for v in step_hooks_us(runner, model,
                                                                                                     3000))
    figures["phase_timing_us"] = round(phase_timing_us(runner, 3000), 2)
    figures["block_feed_us"] = round(block_feed_us(model, 3000), 2)
    print(f"\nModelRunner.forward (forward counts, every path): {figures['runner_forward_us']:.2f} us a forward; "
          f"worker hand-off after verify (not due): {figures['worker_handoff_us']:.2f} us a step; phase timing "
          f"(the step, its phases and the verify forward): {figures['phase_timing_us']:.2f} us a step; block draft "
          f"hand-off (DFlash, not due): {figures['block_feed_us']:.2f} us a verify")
    figures["decode_step_us"] = {}
    print(f"whole probe cost of one decode step ({SPEC_STEPS} speculative steps; every hook summed), and its share of "
          f"a {GPU_STEP_US / 1000:.0f} ms GPU step")
    print(f"{'batch':>7}{'CUDA graphs us':>16}{'share':>9}{'eager us':>11}{'share':>9}")
    for batch, graph, eager in decode_step_rows(figures):
        figures["decode_step_us"][batch] = {"graph": graph, "eager": eager}
        print(f"{batch:>7}{graph:>16.2f}{graph / GPU_STEP_US:>9.3%}{eager:>11.2f}{eager / GPU_STEP_US:>9.3%}")
    eagle_probe.uninstall()
    print(f"probe logs: {log_dir}" + ("" if args.keep_logs else " (removed at exit; --keep-logs keeps them)"))
    load_ms, classes, wrapped = load_cost_ms()
    figures["load_ms"] = round(load_ms, 2)
    print(f"load: install with the registry imported ({classes} classes scanned, {wrapped} targets wrapped): "
          f"{load_ms:.2f} ms, budget {LOAD_BUDGET_MS:.0f} ms per process: "
          f"{'PASS' if load_ms <= LOAD_BUDGET_MS else 'OVER'}")
    over = print_budgets(figures, reference)
    if load_ms > LOAD_BUDGET_MS:
        over.append("load")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    if args.check and over:
        sys.exit(1)


def judged_figures(figures):
    """[(budget name, key or None, label, us)] for every figure that has a budget, in print order."""
    rows = []
    for name in ("target_forward_hot", "target_forward_in_situ"):
        rows += [(name, mode, mode, us) for mode, us in figures[f"{name}_us"].items()]
    rows.append(("draft_forward", None, "", figures["draft_forward_us"]))
    rows += [("verify_step", batch, f"batch {batch}", us) for batch, us in figures["verify_step_us"].items()]
    rows += [("verify_step_coverage", batch, f"batch {batch}", us)
             for batch, us in figures.get("verify_step_coverage_us", {}).items()]
    rows.append(("fingerprint_amortised", None, "3 x 64, float32", figures["fingerprint_amortised_us"]))
    if "fingerprint_and_coverage_amortised_us" in figures:
        rows.append(("fingerprint_and_coverage_amortised", None, "batch 128",
                     figures["fingerprint_and_coverage_amortised_us"]))
    rows.append(("phase_timing", None, "per decode step", figures["phase_timing_us"]))
    rows.append(("block_feed", None, "per hand-off", figures["block_feed_us"]))
    rows.append(("flush", None, "", figures["flush_us"]))
    return rows


def print_budgets(figures, reference):
    """Each figure in us and as a multiple of the reference, its budget and verdict; adds the multiples, the budgets
    and the figures over budget to `figures` and returns the latter."""
    print(f"\n{'figure':<24}{'':<16}{'us':>9}{'x ref':>9}{'budget x':>10}  verdict   (reference {reference:.3f} us)")
    multiples, over = {}, []
    for name, key, label, us in judged_figures(figures):
        multiple, budget, verdict = judged(name, us, reference)
        print(f"{name:<24}{label:<16}{us:>9.2f}{multiple:>9.2f}{budget:>10.1f}  {verdict}")
        if key is None:
            multiples[name] = round(multiple, 2)
        else:
            multiples.setdefault(name, {})[key] = round(multiple, 2)
        if verdict == "OVER":
            over.append(name if key is None else f"{name}:{key}")
    for mode, us in figures.get("in_situ_reference_us", {}).items():
        situ = figures["target_forward_in_situ_us"][mode]
        print(f"in situ {mode:<14} {situ:.2f} us = {situ / us:.2f}x the reference timed in situ ({us:.2f} us; "
              f"context, no budget)")
        multiples.setdefault("target_forward_in_situ_over_in_situ_reference", {})[mode] = round(situ / us, 2)
    figures["multiples"] = multiples
    figures["budgets_x"] = dict(BUDGETS)
    figures["over_budget"] = over
    print("all figures within budget" if not over else f"over budget: {', '.join(over)}")
    return over


if __name__ == "__main__":
    main()
