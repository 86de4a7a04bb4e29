"""Draft side: SGLang's EAGLE-3 draft models.

Wraps the inner draft model forward (what came in from the target, and whether fc ran: SGLang skips it
silently when the incoming width equals the embedding width), for llama_eagle3 and, in releases that have
it (0.5.12+), Kimi-K2.5's MLA draft; and both classes' load_weights (draft_load: the load-time facts, e.g.
the tensors their loaders drop silently).
"""

import weakref

from ...observations import DraftForward
from ..context.graph_capture import is_capturing
from ..parts.draft import SELF_FED_DRAFT_MODES
from ..parts.forwards import draft_count_key
from ..patcher import Integration, PatchTarget
from ..state import STATE
from ..values.boundary import inner_values_on
from ..values.sampler import SampleContext, deliver_ready, draft_input_slots, real_tokens, sampled_mode
from .draft_load import load_weights_wrapper_for
from .draft_load import width as _width

LLAMA_EAGLE3 = "sglang.srt.models.llama_eagle3"
KIMI_EAGLE3 = "sglang.srt.models.kimi_k25_eagle3"


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
        self.target_hidden_size = _width(instance, "hidden_size_in") or _config_target_width(instance)
        self.last = {}  # forward mode -> (signature, count key)
        self.forwards = 0  # target-fed forwards so far: the `step` of a fingerprint


def _config_target_width(instance):
    # Kimi's Eagle3MLAModel keeps no hidden_size_in: it sizes fc from config.target_hidden_size, else hidden_size.
    config = getattr(instance, "config", None)
    return _width(config, "target_hidden_size") or _width(config, "hidden_size")


_statics = {}  # id(module) -> _DraftStatic (its weak reference tells a reused id apart)


def reset():
    _statics.clear()


def draft_static(instance) -> _DraftStatic:
    static = _statics.get(id(instance))
    if static is None or static.ref() is not instance:
        static = _statics[id(instance)] = _DraftStatic(instance)
    return static


def _observe_draft_forward(instance, args, kwargs, error):
    static = draft_static(instance)
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
    """On target-fed draft forwards, fingerprint the hidden states as the draft receives them (before its fc), unless
    the EAGLE worker boundary does (values/boundary.py: the same tensor, on every path)."""
    if not inner_values_on():
        return
    recorder = STATE.recorder
    if sampler.inline and sampler.pending:
        deliver_ready(sampler, recorder)
    forward_batch = args[2] if len(args) > 2 else kwargs["forward_batch"]
    mode = forward_batch.forward_mode
    if sampled_mode(mode, SELF_FED_DRAFT_MODES) or is_capturing():
        return
    hidden = getattr(forward_batch.spec_info, "hidden_states", None)
    if hidden is None or hidden.dim() != 2:
        return
    static = draft_static(instance)
    static.forwards += 1
    wall = sampler.due("draft")
    if wall is None:
        return
    slots, width = draft_input_slots(hidden.shape[-1], static.num_aux, static.embed_width)
    tokens = real_tokens(forward_batch, hidden.shape[0])
    context = SampleContext(role="draft", mode=mode.name, step=static.forwards, tokens=tokens,
                            capture_indices=(None,) * slots, widths=(width,) * slots, num_layers=None, wall=wall)
    if sampler.queue(hidden[:tokens], slots, width, context) and sampler.inline:
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


INTEGRATION = Integration("llama_eagle3", (
    PatchTarget(LLAMA_EAGLE3, "LlamaModel.forward", draft_forward_wrapper, inner_forward=True,
                observes="draft forward events (incoming aux width, fc ran or skipped) and fc findings"),
    PatchTarget(LLAMA_EAGLE3, "LlamaForCausalLMEagle3.load_weights",
                load_weights_wrapper_for("llama_eagle3.load_weights"),
                observes="draft config facts and checkpoint weights no parameter takes"),
), reset=reset)

KIMI_INTEGRATION = Integration("kimi_k25_eagle3", (
    PatchTarget(KIMI_EAGLE3, "Eagle3MLAModel.forward", draft_forward_wrapper, inner_forward=True,
                observes="Kimi-K2.5 draft forward events (incoming aux width, fc ran or skipped)"),
    PatchTarget(KIMI_EAGLE3, "Eagle3DeepseekV2ForCausalLM.load_weights",
                load_weights_wrapper_for("kimi_k25_eagle3.load_weights"),
                observes="Kimi-K2.5 draft load-time facts: ids read (top-level fallback), fc width, dropped "
                         "checkpoint tensors, vocabulary map"),
), reset=reset)
