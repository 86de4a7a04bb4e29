"""Per-step acceptance from values SGLang already holds on the CPU (no device synchronisation added).

Every home and field name comes from the version table (versions.acceptance_targets / acceptance_field):
each hook any release names is wrapped, and the wrapper reads the field the installed release's row names.
A release has only some of these; the rest are never patched (their modules or methods do not exist there).
- v1 worker: EAGLEWorker.verify returns (.., EagleVerifyOutput, ..); SGLang truncates the count when a request
  finishes inside the accepted run.
- v2 (overlap) resolvers take (result, batch) and hold the per-request counts on `result` after they return.
On every spec-v2 path the probe counts only requests that are neither retracted nor finished: the overlap
scheduler runs one more verify step for a request that just finished and discards its tokens (0.5.13+ leaves
it out of its own counts; 0.5.8's server-wide "accept len" still includes it, its per-request meta_info not),
and a step whose requests had all finished is not a verify step.
On a step whose clock reading reached the coverage sampler's next_due, the step's committed tokens go to it as they
are (runtime/values/coverage.py): the v2 resolver's return value (per-request lists, live requests only), the v1
output's token tensor.
"""

from time import time as _now

from ... import versions
from ...observations import VerifyStep
from ..context import sglang_context
from ..patcher import Integration, PatchTarget
from ..state import STATE
from ..values.verify_dumps import V1, V2

_fields = {}  # dotted target -> field name for the installed release (resolved once)
_positions = []  # [the server's speculative steps], read once: the depth of a step that does not carry its own
# Retractions seen in this process. Until the first, no request can be retracted (Req.reset_for_retract is the one
# place SGLang sets is_retracted, proven per release by the contract check), so that pass over the batch is skipped.
_retractions = [0]


def reset() -> None:
    _fields.clear()
    _positions.clear()
    _retractions[0] = 0


def _field(target: str) -> str:
    field = _fields.get(target)
    if field is None:
        field = _fields[target] = versions.acceptance_field(target, STATE.recorder.rules)
    return field


def _tokens_field(target: str) -> str:
    """Where the v1 worker's verify output holds the step's committed tokens (the version table's tokens_field)."""
    key = (target, "tokens")
    field = _fields.get(key)
    if field is None:
        field = _fields[key] = versions.acceptance_field(target, STATE.recorder.rules, "tokens_field")
    return field


def _draft_positions(instance, result=None) -> int:
    """The server's speculative steps (launch value): the depth of a v1 worker's step, and of a v2 step whose result
    carries no accept_index."""
    if _positions:
        return _positions[0]
    steps = None
    owners = (instance, getattr(instance, "server_args", None), sglang_context.spec())
    for owner in owners:
        value = getattr(owner, "speculative_num_steps", None)
        if isinstance(value, int):
            steps = value
            break
    if steps is None or _block_draft(owners):
        # a chain proposes num_draft_tokens - 1 tokens, the last is the bonus; so does a block draft (DFlash, DSpark),
        # whose launch sets speculative_num_steps to 1 whatever its block
        if result is None or type(result.speculative_num_draft_tokens) is not int:
            return steps or 0
        steps = int(result.speculative_num_draft_tokens) - int(getattr(result, "num_non_draft_tokens_per_req", 1))
    _positions.append(steps)
    return steps


def _block_draft(owners) -> bool:
    """Whether the server's speculative algorithm drafts a block (versions.BLOCK_ALGORITHMS)."""
    for owner in owners:
        algorithm = getattr(owner, "speculative_algorithm", None)
        if algorithm is not None:
            name = getattr(algorithm, "name", algorithm)
            return str(name).upper() in versions.BLOCK_ALGORITHMS
    return False


def _step_shape(instance, result):
    """(depth, drafts proposed per request) of one v2 verify step, from the step itself: SGLang's accept_index is
    [requests, spec_steps + 1] whatever the topk (a tree's depth is its draft steps), and the adaptive worker's steps
    change between steps (read at resolve time, one step late under overlap, they would be another step's). Its shape
    is host metadata: reading it does not touch the device. A tree proposes every node after its root."""
    shape = getattr(getattr(result, "accept_index", None), "shape", None)
    if shape is not None and len(shape) == 2:
        depth = shape[1] - 1
    else:
        depth = _positions[0] if _positions else _draft_positions(instance, result)
    tokens = getattr(result, "speculative_num_draft_tokens", None)
    if type(tokens) is not int:
        return depth, 0
    return depth, tokens - getattr(result, "num_non_draft_tokens_per_req", 1)


def _any_ended(reqs) -> bool:
    """Whether a request of the step had finished (or was retracted, once a retraction was seen). A plain loop: its
    specialised attribute reads cost half of any(map(attrgetter(...), reqs)) at a batch of 128."""
    if _retractions[0]:
        for req in reqs:  # noqa: SIM110  (the hot path: a plain loop, no generator)
            if req.finished_reason is not None or req.is_retracted:
                return True
        return False
    for req in reqs:  # noqa: SIM110
        if req.finished_reason is not None:  # the body of Req.finished()
            return True
    return False


def _live(counts, reqs):
    """(counts, requests) of the requests still running: with the overlap scheduler a request that finished (or
    was retracted) in the previous step rides one more verify step whose tokens SGLang discards. In the common case
    (none ended) the requests are a copy of the batch's list (a C copy: the slices read them later, and SGLang may
    rebind or change its list)."""
    if not _any_ended(reqs):
        return counts, reqs[:]
    live = [(n, req) for n, req in zip(counts, reqs) if not (req.is_retracted or req.finished())]
    return [n for n, _ in live], [req for _, req in live]


def retraction_wrapper(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    _retractions[0] += 1
    return result


_new_tuple = tuple.__new__  # VerifyStep(...) runs a Python __new__; this is the same tuple made in C


def _record(accepted, positions, source, reqs=(), batch_size=0, graph=None, proposed=0):
    """One verify step to the recorder's parts. Once the recorder is settled (ranks read, start-up over) the step
    goes to the parts' handlers here: the general verify_step's checks and calls are a third of a step's cost."""
    recorder = STATE.recorder
    step = _new_tuple(VerifyStep, (accepted, positions, source, reqs, batch_size, graph, proposed))
    if not recorder.settled:
        recorder.verify_step(step)
        return
    for handler in recorder.verify_handlers:
        handler(step)
    periodic = recorder.periodic
    if periodic.hot_ticks and periodic.clock() >= periodic.next_tick:
        periodic.tick()


def _v1_wrapper(target: str, site: str):
    def wrapper(wrapped, instance, args, kwargs):
        output = wrapped(*args, **kwargs)
        if STATE.active:
            try:
                # returns (logits, verify output, [batch,] can_run_cuda_graph): the last is the path (contract)
                batch = args[0] if args else kwargs.get("batch")
                reqs = getattr(batch, "reqs", None) or ()
                counts = getattr(output[1], _field(target))
                _record(counts, _draft_positions(instance), target, reqs[:], len(reqs), output[-1])
                coverage = STATE.recorder.coverage
                if coverage is not None and (now := _now()) >= coverage.next_due:  # committed tokens, on the device
                    coverage.sample_device(now, getattr(output[1], _tokens_field(target)))
                if STATE.recorder.dumps.waiting:  # a dumped verify forward awaits its accepted rows
                    STATE.recorder.dumps.verify_resolved(reqs, counts, V1)
            except Exception as exc:
                STATE.report_error(site, exc)
        return output

    return wrapper


def _v2_wrapper(target: str, site: str):
    def wrapper(wrapped, instance, args, kwargs):
        output = wrapped(*args, **kwargs)
        if STATE.active:
            try:
                result = args[0] if args else kwargs["result"]
                batch = args[1] if len(args) > 1 else kwargs["batch"]
                counts = getattr(result, _fields.get(target) or _field(target))
                live, reqs = _live(counts, batch.reqs)
                if live:
                    depth, proposed = _step_shape(instance, result)
                    _record(live, depth, target, reqs, len(counts), getattr(result, "can_run_cuda_graph", None),
                            proposed)
                    coverage = STATE.recorder.coverage
                    if coverage is not None and (now := _now()) >= coverage.next_due:
                        # the committed tokens, host lists; all live when no count was left out (the common case)
                        coverage.sample_lists(now, output if live is counts else _live(output, batch.reqs)[0])
                if STATE.recorder.dumps.waiting:  # a dumped verify forward awaits its accepted rows
                    STATE.recorder.dumps.verify_resolved(batch.reqs, counts, V2)
            except Exception as exc:
                STATE.report_error(site, exc)
        return output

    return wrapper


_OFF = "per-step acceptance (events and spec metrics) and vocabulary coverage on the {} worker"
_WORKERS = {versions.V1_WORKER: (_v1_wrapper, _OFF.format("v1 EAGLE")),
            versions.V2_WORKER: (_v2_wrapper, _OFF.format("spec-v2 overlap"))}


def _target(module: str, qualname: str, worker: str) -> PatchTarget:
    make_wrapper, off = _WORKERS[worker]
    site = "acceptance." + qualname.rsplit(".", 1)[-1].lstrip("_")
    return PatchTarget(module, qualname, make_wrapper(f"{module}.{qualname}", site), observes=off)


INTEGRATION = Integration("acceptance", tuple(_target(*hook) for hook in versions.acceptance_targets()),
                          reset=reset)
RETRACTION_INTEGRATION = Integration("retraction", (
    PatchTarget(versions.REQ_MODULE, versions.RETRACT_HOOK, retraction_wrapper,
                observes="retractions (a retracted request's verify step is not counted, as in SGLang's own counts)"),
))


def wrapper_for(qualname: str):
    """The installed wrapper of the hook whose qualified name is `qualname` (for benchmarks and tests)."""
    for target in INTEGRATION.targets:
        if target.qualname == qualname:
            return target.wrapper
    raise KeyError(qualname)
