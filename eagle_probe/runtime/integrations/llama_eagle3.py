"""Draft side: SGLang's EAGLE-3 draft models.

Wraps the inner draft model forward (what came in from the target, and whether fc ran: SGLang skips it
silently when the incoming width equals the embedding width), for llama_eagle3 and, in releases that have
it, Kimi-K2.5's MLA draft; and LlamaForCausalLMEagle3.load_weights (which drops unknown tensors silently).
"""

import weakref

from ...analysis.draft_weights import unconsumed_weights
from ...analysis.vocab_coverage import hot_ids
from ...analysis.vocab_map import map_problems
from ...observations import DraftForward, DraftLoaded, DraftVocabulary
from ..state import STATE
from ..patcher import Integration, PatchTarget
from ..parts.draft import SELF_FED_DRAFT_MODES
from ..parts.forwards import draft_count_key
from ..values.embedding_check import compare_with_target
from ..values.sampler import SampleContext, deliver_ready, real_tokens, sampled_mode
from ..context.graph_capture import is_capturing

LLAMA_EAGLE3 = "sglang.srt.models.llama_eagle3"
KIMI_EAGLE3 = "sglang.srt.models.kimi_k25_eagle3"


def _width(module, *names):
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, int):
            return value
    return None


class _DraftStatic:
    __slots__ = ("ref", "model_class", "fc_in", "embed_width", "num_aux", "target_hidden_size", "last", "forwards")

    def __init__(self, instance):
        self.ref = weakref.ref(instance)
        self.model_class = type(instance).__name__
        fc = getattr(instance, "fc", None)
        # nn.Linear has in_features; Kimi's ColumnParallelLinear has input_size.
        self.fc_in = _width(fc, "in_features", "input_size") if fc is not None else None
        self.embed_width = _width(getattr(instance, "embed_tokens", None), "embedding_dim")
        self.num_aux = _width(instance, "num_aux_hidden_states")
        self.target_hidden_size = _width(instance, "hidden_size_in")
        self.last = {}  # forward mode -> (signature, count key)
        self.forwards = 0  # target-fed forwards so far: the `step` of a fingerprint


_statics = {}  # id(module) -> _DraftStatic (its weak reference tells a reused id apart)


def reset():
    _statics.clear()


def _static_for(instance) -> _DraftStatic:
    static = _statics.get(id(instance))
    if static is None or static.ref() is not instance:
        static = _statics[id(instance)] = _DraftStatic(instance)
    return static


def _observe_draft_forward(instance, args, kwargs, error):
    static = _static_for(instance)
    forward_batch = args[2] if len(args) > 2 else kwargs["forward_batch"]
    input_embeds = args[3] if len(args) > 3 else kwargs.get("input_embeds")
    hidden = getattr(forward_batch.spec_info, "hidden_states", None)
    aux_width = hidden.shape[-1] if hidden is not None else None
    embed_width = input_embeds.shape[-1] if input_embeds is not None else static.embed_width
    mode = forward_batch.forward_mode
    capturing = is_capturing()
    recorder = STATE.recorder
    signature = (aux_width, embed_width, capturing)
    if error is None:
        last = static.last.get(mode)
        if last is not None and last[0] == signature:
            recorder.draft_repeated(last[1])
            return
    input_ids = args[0] if args else kwargs.get("input_ids")
    obs = DraftForward(
        static.model_class, mode.name, capturing, aux_width, embed_width, static.fc_in,
        aux_width is not None and aux_width != embed_width, static.num_aux, static.target_hidden_size,
        input_ids.shape[0] if input_ids is not None else 0,
        None if error is None else f"{type(error).__name__}: {error}"[:300])
    recorder.draft_forward(obs)
    if error is None:
        static.last[mode] = (signature, draft_count_key(obs))


def _sample_draft_input(sampler, instance, args, kwargs):
    """On target-fed draft forwards, fingerprint the hidden states as the draft receives them (before its fc)."""
    recorder = STATE.recorder
    if sampler.pending:
        deliver_ready(sampler, recorder)
    forward_batch = args[2] if len(args) > 2 else kwargs["forward_batch"]
    mode = forward_batch.forward_mode
    if sampled_mode(mode, SELF_FED_DRAFT_MODES) or is_capturing():
        return
    hidden = getattr(forward_batch.spec_info, "hidden_states", None)
    if hidden is None or hidden.dim() != 2:
        return
    static = _static_for(instance)
    static.forwards += 1
    wall = sampler.due("draft")
    if wall is None:
        return
    width_in = hidden.shape[-1]
    slots = static.num_aux if static.num_aux and width_in % static.num_aux == 0 else 1
    if width_in == static.embed_width:
        slots = 1  # fc is skipped: the draft takes this state as it is
    width = width_in // slots
    tokens = real_tokens(forward_batch, hidden.shape[0])
    context = SampleContext(role="draft", mode=mode.name, step=static.forwards, tokens=tokens,
                            capture_indices=(None,) * slots, widths=(width,) * slots, num_layers=None, wall=wall)
    if sampler.queue(hidden[:tokens], slots, width, context):
        deliver_ready(sampler, recorder)


def draft_forward_wrapper(wrapped, instance, args, kwargs):
    if not STATE.active:
        return wrapped(*args, **kwargs)
    sampler = STATE.recorder.fingerprints
    if sampler is not None:
        try:
            _sample_draft_input(sampler, instance, args, kwargs)
        except Exception as exc:
            STATE.report_error("llama_eagle3.fingerprint", exc)
    try:
        result = wrapped(*args, **kwargs)
    except Exception as error:
        try:
            _observe_draft_forward(instance, args, kwargs, error)
        except Exception as exc:
            STATE.report_error("llama_eagle3.forward", exc)
        raise
    try:
        _observe_draft_forward(instance, args, kwargs, None)
    except Exception as exc:
        STATE.report_error("llama_eagle3.forward", exc)
    return result


def _tap_names(weights, names, kept):
    # Pass every (name, tensor) through unchanged; keep the names, and the embedding until load_weights returns.
    for item in weights:
        names.append(item[0])
        if item[0].endswith("embed_tokens.weight"):
            kept["embed"] = item[1]
        elif "d2t" in item[0]:  # the vocabulary map, as SGLang takes it (any name containing d2t)
            kept["d2t"] = item[1]
        yield item


def _observe_loaded(instance, names, kept):
    config = instance.config
    inner = instance.model
    eagle_config = getattr(config, "eagle_config", None) or {}
    ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
    fc = getattr(inner, "fc", None)
    dropped, ignored = unconsumed_weights(names, [n for n, _ in instance.named_parameters()])
    embed_rel_diff, embed_compare = None, ""
    if "embed" in kept:
        try:
            embed_rel_diff, embed_compare = compare_with_target(kept.pop("embed"))
        except Exception as exc:  # an unreadable target file: say so, never fail the load
            embed_compare = f"not compared: {type(exc).__name__}: {exc}"[:300]
    draft_vocab, target_vocab = getattr(config, "draft_vocab_size", None), getattr(config, "vocab_size", None)
    d2t = kept.pop("d2t", None)
    problems = offsets = None
    if d2t is not None and not d2t.is_cuda:  # a CPU copy: no device sync
        offsets = d2t.tolist()
        if isinstance(target_vocab, int):
            problems = map_problems(offsets, draft_vocab, target_vocab)
    STATE.recorder.draft_loaded(DraftLoaded(
        model_class=type(instance).__name__,
        eagle_layer_ids=None if ids is None else tuple(int(i) for i in ids),
        use_aux_hidden_state=eagle_config.get("use_aux_hidden_state"),
        target_hidden_size=getattr(config, "target_hidden_size", None),
        draft_hidden_size=getattr(config, "hidden_size", None),
        num_aux=_width(inner, "num_aux_hidden_states"),
        fc_in=_width(fc, "in_features", "input_size") if fc is not None else None,
        fc_out=_width(fc, "out_features", "output_size") if fc is not None else None,
        norm_before_fc=getattr(inner, "input_norm", None) is not None,
        fc_norm=getattr(inner, "fc_norm", None) is not None,
        norm_output=bool(getattr(inner, "norm_output", False)),
        draft_vocab_size=draft_vocab,
        lm_head_from_target=bool(getattr(instance, "load_lm_head_from_target", False)),
        checkpoint_tensors=len(names),
        dropped=dropped, ignored=ignored,
        embed_in_checkpoint=any(n.endswith("embed_tokens.weight") for n in names),
        lm_head_in_checkpoint=any(n.endswith("lm_head.weight") for n in names),
        embed_rel_diff=embed_rel_diff, embed_compare=embed_compare,
        target_vocab_size=target_vocab, d2t_size=None if d2t is None else int(d2t.numel()), d2t_problems=problems,
    ))
    if d2t is None or offsets is not None:  # a map on a device is not read: coverage then stays unknown
        kind, ids = hot_ids(draft_vocab, target_vocab, offsets)
        STATE.recorder.observe("draft_vocabulary", DraftVocabulary(
            type(instance).__name__, draft_vocab, target_vocab, kind, ids))


def load_weights_wrapper(wrapped, instance, args, kwargs):
    if not STATE.active:
        return wrapped(*args, **kwargs)
    names, kept = [], {}
    if args:
        args = (_tap_names(args[0], names, kept),) + tuple(args[1:])
    elif "weights" in kwargs:
        kwargs = dict(kwargs, weights=_tap_names(kwargs["weights"], names, kept))
    result = wrapped(*args, **kwargs)
    try:
        _observe_loaded(instance, names, kept)
    except Exception as exc:
        STATE.report_error("llama_eagle3.load_weights", exc)
    return result


INTEGRATION = Integration("llama_eagle3", (
    PatchTarget(LLAMA_EAGLE3, "LlamaModel.forward", draft_forward_wrapper, inner_forward=True,
                observes="draft forward events (incoming aux width, fc ran or skipped) and fc findings"),
    PatchTarget(LLAMA_EAGLE3, "LlamaForCausalLMEagle3.load_weights", load_weights_wrapper,
                observes="draft config facts and checkpoint weights no parameter takes"),
), reset=reset)

KIMI_INTEGRATION = Integration("kimi_k25_eagle3", (
    PatchTarget(KIMI_EAGLE3, "Eagle3MLAModel.forward", draft_forward_wrapper, inner_forward=True,
                observes="Kimi-K2.5 draft forward events (incoming aux width, fc ran or skipped)"),
), reset=reset)
