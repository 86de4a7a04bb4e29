"""Which target forwards are dumped, and the dump job of one forward: what the draft is fed, with the file's
metadata. Decided from counts that are equal on every rank, never from whether this rank's writer still runs
(all-layer taps must stay matched across ranks); the rank's writer then gets the job or not."""

from ...dump_format import (
    AUX,
    EXTEND_MODE,
    FINAL,
    INPUT_IDS,
    LAYER_PREFIX,
    POSITIONS,
    PREFIX_LENS,
    SEQ_LENS,
    VERIFY_MODE,
)
from .boundary import FORWARD, DumpedForward, dump_metadata
from .dumps import DumpJob
from .layer_taps import tap_layers
from .sampler import packed_aux, real_tokens
from .verify_dumps import VerifyDumpJob, unmatched_verify


class DumpPlan:
    """One planned dump: whether this rank writes it, and the layer taps to remove after the forward."""

    __slots__ = ("write", "step", "kept", "untap")

    def __init__(self, write: bool, step: int, kept=None, untap=None):
        self.write, self.step, self.kept, self.untap = write, step, kept, untap

    def remove_taps(self):
        if self.untap is not None:
            self.untap()
            self.untap = None


class DumpPlanner:
    """Which target forwards are dumped: decided from counts that are equal on every rank, never from whether
    this rank's writer still runs (taps must stay matched across ranks)."""

    def __init__(self, every: int, ranks, all_layers: bool, layer_kwarg, modes=("extend",)):
        self.every = every
        self.ranks = None if ranks is None else frozenset(ranks)
        self.all_layers = all_layers and layer_kwarg is not None
        self.layer_kwarg = layer_kwarg
        self.modes = frozenset(mode.upper() for mode in modes)  # ForwardMode names: EXTEND, TARGET_VERIFY
        self.counts = dict.fromkeys(self.modes, 0)  # eligible forwards per mode
        self.eligible = 0  # of EXTEND (as before verify dumps)

    def pick(self, tp_rank, writer_running: bool, mode: str = EXTEND_MODE):
        """Count one forward of a dumped mode: a DumpPlan when it is dumped (no layer taps), else None."""
        count = self.counts[mode] = self.counts[mode] + 1
        if mode == EXTEND_MODE:
            self.eligible = count
        if (count - 1) % self.every:
            return None
        return DumpPlan(writer_running and (self.ranks is None or (tp_rank or 0) in self.ranks), count)

    def plan(self, model, tp_rank, can_run_tbo: bool, writer_running: bool, mode: str = EXTEND_MODE):
        """For an eager target forward of a dumped mode about to run: a DumpPlan, or None."""
        plan = self.pick(tp_rank, writer_running, mode)
        if plan is None:
            return None
        if self.all_layers and not can_run_tbo:  # TBO runs its layers elsewhere: aux only then
            plan.kept, plan.untap = tap_layers(model, int(model.start_layer), int(model.end_layer),
                                               self.layer_kwarg, keep=plan.write)
        return plan


def plan_forward(model, static, forward_batch, can_run_tbo: bool, capturing: bool, recorder):
    """For a target forward about to run: a DumpPlan when it is an eager forward of a dumped mode (EXTEND,
    TARGET_VERIFY) the planner picks."""
    mode = forward_batch.forward_mode.name
    dumps = recorder.dumps
    if capturing or static.role != "target" or mode not in dumps.planner.modes:
        return None
    ranks = recorder.ensure_ranks() and recorder.ranks
    return dumps.planner.plan(model, ranks.tp_rank if ranks else 0, can_run_tbo, dumps.writer.usable(), mode)


def submit_forward(plan, static, forward_batch, input_ids, positions, layers, result, recorder):
    """Queue the host copies of what the draft is fed by this forward, with the file's metadata."""
    import torch

    if type(result) is not tuple or len(result) != 2:
        return  # not the last pipeline stage, or capture off: nothing is fed to a draft here
    hidden, aux = result
    aux = packed_aux(aux)
    tokens = real_tokens(forward_batch, hidden.shape[0])
    tensors = {AUX: aux[:tokens], FINAL: hidden[:tokens], INPUT_IDS: input_ids[:tokens],
               POSITIONS: positions[:tokens]}
    mode = forward_batch.forward_mode.name
    req_ids = getattr(forward_batch, "rids", None) if mode == VERIFY_MODE else None
    if mode == VERIFY_MODE and unmatched_verify(recorder.dumps.waiting, tokens, req_ids):
        recorder.dumps.skipped("verify_unmatched")
        return
    for name in (SEQ_LENS, PREFIX_LENS):
        values = getattr(forward_batch, f"{name}_cpu", None)
        if isinstance(values, list):
            tensors[name] = torch.tensor(values, dtype=torch.int64)
    kept = plan.kept or {}
    for index, value in sorted(kept.items()):
        tensors[f"{LAYER_PREFIX}{index}"] = value[:tokens]
    metadata = dump_metadata(recorder, DumpedForward(
        static.model_class, hidden.dtype, mode, static.forwards + 1, plan.step, tokens, len(tensors.get(SEQ_LENS, ())),
        hidden.shape[-1], static.num_layers, sorted(set(layers)), kept), recorder.dumps.planner)
    metadata.update(source=FORWARD, final_hidden_state=True)
    if req_ids is None:
        job = DumpJob(tensors, metadata)
    else:
        rows = tokens // len(req_ids)
        metadata.update(req_ids=list(req_ids), rows_per_request=rows, requests=len(req_ids))
        job = VerifyDumpJob(tensors, metadata, req_ids, rows)
    if not recorder.dumps.writer.submit(job):
        recorder.dumps.skipped("writer_behind")
    elif req_ids is not None:
        recorder.dumps.waiting.append(job)
