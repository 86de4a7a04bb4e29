"""What the contract check claims about one release: every patch target of the probe's integrations (with the
leading parameters the wrappers read), every attribute the probe reads (ATTRIBUTES_READ), and every field of
the release's row of `versions.RULES` turned into claims about its source (`claims_for`)."""

from __future__ import annotations

import ast

from ... import versions
from ...analysis.draft_ids import DRAFT_CLASSES
from ...versions import RANKS_RUNTIME_CONTEXT, V1_WORKER, VersionRules
from .block_draft_claims import block_draft_claims
from .claims import Claim, absent, body_check, dataclass_field, defines, env_default, module_mentions, sets_attributes
from .config_key_claims import config_key_claims
from .draft_claims import KIMI_MODULE, draft_id_claims
from .rule_checks import (
    assigns_result_field,
    aux_list_test,
    aux_packed_test,
    calls_attributes,
    calls_name,
    capture_flag_claim,
    capture_rule_test,
    default_ids_test,
    embedding_capturable_test,
    embedding_not_capturable_test,
    graph_setup_calls_defaults,
    no_default_setter_calls,
    passes_argument,
    passes_keyword,
    reads_attribute,
    retraction_sites_problem,
    returns_committed_token_lists,
    returns_last,
    returns_test,
    takes_param,
)

DS = versions.DEEPSEEK_V2
FORWARD_BATCH = "sglang.srt.model_executor.forward_batch_info"
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
_SAMPLING = "sglang.srt.sampling.sampling_params"
HEALTH_MODULE = "sglang.srt.utils.common"  # launch_dummy_health_check_server: what node ranks >= 1 serve


def _sets_top_k_one(src):
    tree = src.tree(_SAMPLING)
    if tree is None:
        return f"{_SAMPLING} not found"
    assigns = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    return None if "self.top_k = 1" in assigns else "never assigns self.top_k = 1"


# Leading parameters (after self) each wrapper reads by position or name, keyed by patch target.
# A target of ALL that is not listed here is checked for existence only (and says so).
EXPECTED_PARAMS: dict[str, tuple[str, ...]] = {
    f"{DS}.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture": ("layer_ids",),
    f"{DS}.DeepseekV2Model.forward": ("input_ids", "positions", "forward_batch"),
    f"{MODEL_RUNNER}.ModelRunner.load_model": (),
    f"{versions.REQ_MODULE}.{versions.RETRACT_HOOK}": (),
    "sglang.srt.models.llama_eagle3.LlamaModel.forward": ("input_ids", "positions", "forward_batch", "input_embeds"),
    "sglang.srt.models.llama_eagle3.LlamaForCausalLMEagle3.load_weights": ("weights",),
    "sglang.srt.models.kimi_k25_eagle3.Eagle3MLAModel.forward": ("input_ids", "positions", "forward_batch",
                                                                 "input_embeds"),
    "sglang.srt.models.kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM.load_weights": ("weights",),
    "sglang.srt.models.registry._ModelRegistry.resolve_model_cls": ("architectures",),
    f"{versions.WORKER_MODULE}.{versions.WORKER_PREFILL_HOOK}": ("batch", "target_hidden_states"),
    f"{versions.WORKER_MODULE}.{versions.WORKER_DECODE_HOOK}": ("batch", "batch_result"),
    **{f"{versions.WORKER_MODULE}.{hook}": ("batch",)
       for hook in (versions.WORKER_STEP_HOOK, versions.WORKER_DRAFT_HOOK, versions.WORKER_VERIFY_HOOK)},
    f"{MODEL_RUNNER}.ModelRunner.forward": ("forward_batch",),
    f"{versions.DEVICE_TIMER_MODULE}.{versions.DEVICE_TIMER_HOOK}": ("metadata",),
    **{f"{module}.{qualname}": ("forward_batch",) for module, qualname, _ in versions.GRAPH_ENTRIES},
    f"{versions.TOKENIZER_MODULE}.{versions.REQUEST_ARRIVAL_HOOK}": ("obj", "request"),
    f"{versions.TOKENIZER_MODULE}.{versions.REQUEST_FINISH_HOOK}": ("meta_info", "recv_obj", "i"),
}
# Targets found at load time (integrations/targets.py, Integration.expand): by method name.
FOUND_PARAMS = {"set_eagle3_layers_to_capture": ("layer_ids",), "forward": ("input_ids", "positions", "forward_batch")}
ACCEPTANCE_PARAMS = {V1_WORKER: ("batch",), versions.V2_WORKER: ("result", "batch")}

# Attributes the probe reads (integrations/, ranks.py), true in every supported release.
ATTRIBUTES_READ: tuple[Claim, ...] = (
    sets_attributes(DS, "DeepseekV2Model", ("layers_to_capture", "first_k_dense_replace", "start_layer", "end_layer")),
    body_check(DS, "DeepseekV2Model.forward", "reads self.layers_to_capture and forward_batch.can_run_tbo",
               lambda node: None if {"self.layers_to_capture", "forward_batch.can_run_tbo"} <= {
                   ast.unparse(n) for n in ast.walk(node) if isinstance(n, ast.Attribute)} else "does not read both"),
    sets_attributes(DS, "DeepseekV2ForCausalLM", ("model", "config", "pp_group", "capture_aux_hidden_states")),
    defines(FORWARD_BATCH, "ForwardBatch.can_run_tbo", kind="property"),
    body_check(FORWARD_BATCH, "ForwardBatch.can_run_tbo", "returns self.tbo_split_seq_index is not None (the target "
               "wrapper reads that field)", returns_test("self.tbo_split_seq_index is not None")),
    dataclass_field(FORWARD_BATCH, "ForwardBatch", "forward_mode"),
    dataclass_field(FORWARD_BATCH, "ForwardBatch", "tbo_split_seq_index"),
    sets_attributes(MODEL_RUNNER, "ModelRunner", ("is_draft_worker", "model")),
    defines("sglang.srt.distributed.parallel_state", "model_parallel_is_initialized"),
    defines("sglang.srt.distributed.parallel_state", "get_tensor_model_parallel_rank"),
    defines("sglang.srt.distributed.parallel_state", "get_tensor_model_parallel_world_size"),
    defines("sglang.srt.distributed.parallel_state", "get_pp_group"),
    Claim(f"{versions.REQ_MODULE}.{versions.RETRACT_HOOK} is the only place that sets is_retracted = True (the "
          "probe counts retractions there)", lambda src: retraction_sites_problem(src, versions.REQ_MODULE,
                                                                                  versions.RETRACT_HOOK)),
    # Acceptance by slice (runtime/slice_counter.py) reads these per request off the hot path, and the path of the
    # spec-v2 verify step from its result.
    sets_attributes(versions.REQ_MODULE, "Req", ("origin_input_ids", "cached_tokens", "finished_reason",
                                                 "sampling_params", "require_reasoning")),
    Claim(f"{_SAMPLING}.SamplingParams turns temperature 0 into top_k = 1 (the slices' greedy bucket reads top_k)",
          _sets_top_k_one),
    body_check(versions.REQ_MODULE, "Req.__init__", "starts cached_tokens at 0 (a prefill adds the cached prefix)",
               lambda node: None if "self.cached_tokens = 0" in ast.unparse(node) else "does not"),
    dataclass_field(versions.REQ_MODULE, "ScheduleBatch", "reqs"),
    dataclass_field("sglang.srt.managers.utils", "GenerationBatchResult", "can_run_cuda_graph"),
)

_SETTER = "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"

_MODEL_FORWARD = "DeepseekV2Model.forward"


def _rule_claims(rules: VersionRules) -> list[Claim]:
    """Each field of a row of versions.RULES as claims about that release's source (in this order: a release's
    broken claims are listed in it)."""
    return (_capture_claims(rules) + _tbo_claims(rules) + _acceptance_claims(rules) + _optional_hook_claims(rules)
            + _absent_claims(rules) + [env_default(versions.SPEC_V2_ENV, rules.spec_v2_default)]
            + _rank_claims(rules) + _draft_claims(rules) + [_other_nodes_metrics_claim(rules)])


def _capture_claims(rules: VersionRules) -> list[Claim]:
    """How the row says the target captures aux states: the setter's id rule and defaults, who calls it during
    graph set-up, the aux states' format, whether the embedding output is capturable, the capture-mode flag."""
    out = [body_check(DS, _SETTER, f"maps ids by {rules.capture_id_rule}", capture_rule_test(rules.capture_id_rule)),
           body_check(DS, _SETTER, f"defaults (ids None) are {rules.default_ids}", default_ids_test)]
    if rules.graph_setup_uses_default_layers:
        out += [graph_setup_calls_defaults(c) for c in rules.graph_setup_callers]
    else:
        out.append(no_default_setter_calls())
    out.append(body_check(DS, _MODEL_FORWARD, f"returns aux states as a {rules.aux_format}",
                          aux_list_test if rules.aux_format == "list" else aux_packed_test))
    out.append(body_check(DS, _MODEL_FORWARD,
                          "captures the residual in the decoder layer (index 0 = embedding output)"
                          if rules.embedding_capturable else
                          "captures hidden_states + residual in its loop (index 0: residual is None)",
                          embedding_capturable_test if rules.embedding_capturable else embedding_not_capturable_test))
    if rules.embedding_capturable:
        out.append(body_check(DS, "DeepseekV2DecoderLayer.forward", f"takes {versions.LAYER_CAPTURE_KWARG}= (the "
                              "all-layer dumps hand each layer their collector there)",
                              takes_param(versions.LAYER_CAPTURE_KWARG)))
    out.append(defines(rules.capture_flag_module, "get_is_capture_mode"))
    out.append(capture_flag_claim(rules.capture_flag_module))
    return out


def _tbo_claims(rules: VersionRules) -> list[Claim]:
    """The two-batch-overlap helper the target's forward runs its layers through."""
    return [defines(DS, rules.tbo_helper, what=f"{DS} binds the TBO helper {rules.tbo_helper}"),
            body_check(DS, _MODEL_FORWARD, f"runs TBO layers through {rules.tbo_helper}",
                       calls_name(rules.tbo_helper))]


def _acceptance_claims(rules: VersionRules) -> list[Claim]:
    """Each acceptance hook of the row: it exists, and where its accepted counts and committed tokens come from."""
    out = []
    for hook in rules.acceptance:
        out.append(defines(hook.module, hook.qualname, ACCEPTANCE_PARAMS[hook.worker],
                           what=f"acceptance ({hook.worker} worker, {hook.when}): {hook.target} exists"))
        if hook.worker == V1_WORKER:
            out.append(body_check(hook.module, hook.qualname, "returns (..., can_run_cuda_graph): the slices' path",
                                  returns_last("can_run_cuda_graph")))
        if hook.field_owner is not None:
            out.append(dataclass_field(*hook.field_owner, hook.field))
            out.append(dataclass_field(*hook.field_owner, hook.tokens_field))  # the committed tokens (coverage)
        else:
            out.append(body_check(hook.module, hook.qualname, f"sets result.{hook.field} with the bonus token "
                                  f"{'kept' if hook.includes_bonus else 'subtracted'}",
                                  assigns_result_field(hook.field)))
            out.append(body_check(hook.module, hook.qualname, "returns the committed tokens per request (vocabulary "
                                  "coverage reads them)", returns_committed_token_lists))
    return out


def _optional_hook_claims(rules: VersionRules) -> list[Claim]:
    """The hooks only some rows have: the worker boundary, the traffic classes, the graph runners' entry points."""
    out = []
    if rules.worker_boundary:
        out += _worker_boundary_claims()
    if rules.request_classes:
        out += _request_class_claims()
    if rules.graph_entries:
        out.append(body_check(MODEL_RUNNER, "ModelRunner._forward_raw", "replays a graph through "
                              "decode_cuda_graph_runner.execute and prefill_cuda_graph_runner.execute (the probe "
                              "marks a forward graph_replay there)",
                              calls_attributes("self.decode_cuda_graph_runner.execute",
                                               "self.prefill_cuda_graph_runner.execute")))
    return out


def _absent_claims(rules: VersionRules) -> list[Claim]:
    """What the row says the release lacks: its absent modules, and the v1 worker when no hook of the row is one."""
    out = [Claim(f"{module} does not exist in this release",
                 lambda src, module=module: "exists" if src.has_module(module) else None)
           for module in rules.absent_modules]
    if not any(h.worker == V1_WORKER for h in rules.acceptance):
        out.append(absent("sglang.srt.speculative.eagle_worker", "EAGLEWorker", "no v1 worker in this row"))
    return out


def _rank_claims(rules: VersionRules) -> list[Claim]:
    """Where the probe reads its ranks: runtime_context or parallel_state, and the DP rank's source."""
    if rules.rank_source == RANKS_RUNTIME_CONTEXT:
        out = [defines("sglang.srt.runtime_context", "get_parallel")]
    else:
        out = [Claim("sglang.srt.runtime_context does not exist (ranks from parallel_state)",
                     lambda src: "exists" if src.has_module("sglang.srt.runtime_context") else None)]
    if rules.dp_rank_from_dp_attention:
        out.append(defines("sglang.srt.layers.dp_attention", "get_attention_dp_rank"))
    else:
        out.append(absent("sglang.srt.layers.dp_attention", "get_attention_dp_rank", "dp rank from runtime_context"))
    return out


def _draft_claims(rules: VersionRules) -> list[Claim]:
    """How the EAGLE-3 drafts size their fc and read their ids (the Kimi draft's claims only where it exists)."""
    return [module_mentions("sglang.srt.models.llama_eagle3", "num_aux_hidden_states", rules.draft_reads_num_aux,
                            "the EAGLE-3 draft sizes fc by num_aux_hidden_states" if rules.draft_reads_num_aux
                            else "the EAGLE-3 draft sizes fc for 3 aux states (num_aux_hidden_states not read)"),
            *draft_id_claims(KIMI_MODULE not in rules.absent_modules)]


def _other_nodes_metrics_claim(rules: VersionRules) -> Claim:
    """Whether node ranks >= 1 serve /metrics under --enable-metrics (the probe's series go through SGLang's)."""
    return body_check(HEALTH_MODULE, "launch_dummy_health_check_server",
                      "adds the Prometheus middleware under --enable-metrics (node ranks >= 1 serve /metrics)"
                      if rules.other_nodes_serve_metrics else "serves no /metrics (node ranks >= 1)",
                      calls_name("add_prometheus_middleware", rules.other_nodes_serve_metrics))


def _worker_boundary_claims() -> list[Claim]:
    """The hand-off the worker wrappers read carries the target's packed aux states, prefill and verify alike."""
    worker = versions.WORKER_MODULE
    return [
        body_check(worker, "EAGLEWorkerV2._forward_prefill_batch", "hands the target's "
                   "batch_output.logits_output.hidden_states to _draft_extend_for_prefill as its second argument",
                   passes_argument("_draft_extend_for_prefill", 1, "batch_output.logits_output.hidden_states")),
        body_check(worker, "EAGLEWorkerV2.forward_batch_generation", "hands the verify result to "
                   "_draft_extend_for_decode as its second argument",
                   passes_argument("_draft_extend_for_decode", 1, "batch_output")),
        body_check(worker, versions.WORKER_DECODE_HOOK, "feeds the draft batch_result.logits_output.hidden_states",
                   reads_attribute("batch_result.logits_output.hidden_states")),
        body_check(worker, versions.WORKER_PREFILL_HOOK, "feeds the draft target_hidden_states (hidden_states=)",
                   passes_keyword("hidden_states", "target_hidden_states")),
        # the draft's view of what it is handed (role draft): worker.draft_runner.model.model's slot count and width
        sets_attributes(worker, "EagleDraftWorker", ["draft_runner"]),
        sets_attributes("sglang.srt.models.llama_eagle3", "LlamaForCausalLMEagle3", ["model"]),
        sets_attributes("sglang.srt.models.llama_eagle3", "LlamaModel", ["num_aux_hidden_states", "embed_tokens"]),
        # a worker verify dump's target_next_ids: the argmax of these per-row logits
        dataclass_field("sglang.srt.layers.logits_processor", "LogitsProcessorOutput", "next_token_logits"),
        # the phases the step timer marks run inside the step (runtime/integrations/phase_timing.py)
        *(body_check(worker, versions.WORKER_STEP_HOOK, f"runs {name} inside the decode step", calls_name(name))
          for name in ("draft", "verify", "_draft_extend_for_decode")),
        sets_attributes(worker, "EAGLEWorkerV2", ["speculative_num_steps"]),
    ]


def _request_class_claims() -> list[Claim]:
    """What the traffic-class hooks read in the HTTP server process (runtime/integrations/request_classes.py)."""
    io_struct, histogram = "sglang.srt.managers.io_struct", versions.REQUEST_HISTOGRAM_FIELD
    return [
        dataclass_field(io_struct, "BaseBatchReq", "rids"),
        dataclass_field(io_struct, "BatchTokenIDOutput", histogram),
        dataclass_field(io_struct, "BatchStrOutput", histogram),
        dataclass_field(io_struct, "GenerateReqInput", "custom_labels"),
        body_check(versions.REQ_MODULE, "Req.update_spec_correct_drafts_histogram", "counts a verify step under its "
                   "number of correct drafts", reads_attribute("self.spec_correct_drafts_histogram")),
        body_check(versions.TOKENIZER_MODULE, "TokenizerManager.generate_request", "creates the request states "
                   "with the HTTP request (_init_req_state(obj, request))", passes_argument("_init_req_state", 1,
                                                                                            "request")),
    ]


def _targets(integration, release):
    """(target, found at load time) for an integration's declared targets and those it finds for `release`."""
    found = integration.expand(release) if getattr(integration, "expand", None) is not None else ()
    return [(t, False) for t in integration.targets] + [(t, True) for t in found]


def target_claims(rules: VersionRules, integrations=None, release=None) -> tuple[list[Claim], list[str]]:
    """Claims for the patch targets of the integrations (those found at load time from the family rows of
    `release`, default the row's first release, included); plus notes on targets not expected here."""
    if integrations is None:
        from ...runtime.integrations import ALL as integrations
    release = release or rules.first
    specific = versions.version_specific_targets()
    claims, notes = [], []
    for integration in integrations:
        for target, found in _targets(integration, release):
            dotted = f"{target.module}.{target.qualname}"
            rows = specific.get(dotted)
            if target.module in rules.absent_modules:
                notes.append(f"{integration.name}: {dotted} not expected: {target.module} is not in this release")
                continue
            if rows is not None and rules not in rows:
                notes.append(f"{integration.name}: {dotted} not expected in this release (version table)")
                continue
            params = EXPECTED_PARAMS.get(dotted)
            if params is None and found:
                params = FOUND_PARAMS[target.qualname.rpartition(".")[2]]
            if params is None:
                for hook in rules.acceptance:
                    if hook.target == dotted:
                        params = ACCEPTANCE_PARAMS[hook.worker]
            claim = defines(target.module, target.qualname, params,
                            what=f"{'found' if found else 'patch'} target of {integration.name}: {dotted}"
                                 + ("" if params is not None
                                    else " exists (signature not declared in contract.EXPECTED_PARAMS)")
                                 + ("" if params is None else f"({', '.join(params)}, ...)"))
            claims.append(claim)
    wrapped = {f"{t.module}.{t.qualname}" for i in integrations for t in i.targets}
    for hook in rules.acceptance:
        claims.append(Claim(f"the probe wraps the acceptance hook {hook.target} ({hook.worker} worker, {hook.when})",
                            lambda src, hook=hook: None if hook.target in wrapped else
                            "no integration in eagle_probe.integrations.ALL patches it"))
    return claims, notes


def claims_for(rules: VersionRules, integrations=None, release=None) -> tuple[list[Claim], list[str]]:
    targets, notes = target_claims(rules, integrations, release)
    version = versions.format_version(release or rules.first)  # the forward keys' table is per release, not per row
    present = [name for name, row in DRAFT_CLASSES.items() if row.module not in rules.absent_modules]
    return (targets + list(ATTRIBUTES_READ) + _rule_claims(rules) + config_key_claims(version, present)
            + block_draft_claims(rules)), notes
