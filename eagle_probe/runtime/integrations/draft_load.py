"""Draft side, load time: the facts of an EAGLE-3 draft once SGLang's load_weights returns, for every draft class
of analysis.draft_ids.DRAFT_CLASSES (LlamaForCausalLMEagle3; Kimi-K2.5's MLA Eagle3DeepseekV2ForCausalLM): the ids
it sized its fc from and where it read them, its fc width, the checkpoint tensors its loader dropped, its
vocabulary map (d2t), its embedding against the target's. What differs between the classes is data (the row).
"""

from ...analysis.draft_ids import KEY, draft_class, draft_reads, takes_d2t, target_ids
from ...analysis.draft_weights import unconsumed_weights
from ...analysis.vocab_coverage import hot_ids
from ...analysis.vocab_map import map_problems
from ...observations import DraftLoaded, DraftVocabulary
from ..state import STATE
from ..values.embedding_check import compare_with_target
from .draft_config import config_facts


def width(module, *names):
    """The first of `names` that is an int attribute of `module` (widths of nn.Linear / SGLang's parallel layers)."""
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, int):
            return value
    return None


def _tap_names(weights, names, kept, row):
    # Pass every (name, tensor) through unchanged; keep the names, and the embedding until load_weights returns.
    for item in weights:
        names.append(item[0])
        if item[0].endswith("embed_tokens.weight"):
            kept["embed"] = item[1]
        elif takes_d2t(row, item[0]):  # the vocabulary map, under the names this class takes it by
            kept["d2t"] = item[1]
        yield item


def _observe_loaded(instance, names, kept):
    config = instance.config
    inner = instance.model
    row = draft_class(type(instance).__name__)
    eagle_config = getattr(config, "eagle_config", None) or {}
    ids_read, read_from, count = draft_reads(row, eagle_config, getattr(config, KEY, None),
                                             getattr(config, "num_aux_hidden_states", None))
    fc = getattr(inner, "fc", None)
    dropped, ignored = unconsumed_weights(names, [n for n, _ in instance.named_parameters()], row.weight_naming)
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
    use_aux = eagle_config.get("use_aux_hidden_state") if isinstance(eagle_config, dict) else \
        getattr(eagle_config, "use_aux_hidden_state", None)
    STATE.recorder.draft_loaded(DraftLoaded(
        model_class=type(instance).__name__,
        eagle_layer_ids=target_ids(eagle_config),
        use_aux_hidden_state=use_aux,
        target_hidden_size=getattr(config, "target_hidden_size", None),
        draft_hidden_size=getattr(config, "hidden_size", None),
        # the model's own count where it keeps one (Kimi's draft from 0.5.15), else the count its rule gives
        num_aux=width(inner, "num_aux_hidden_states") or count,
        fc_in=width(fc, "in_features", "input_size") if fc is not None else None,
        fc_out=width(fc, "out_features", "output_size") if fc is not None else None,
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
        ids_read=ids_read, ids_read_from=read_from,
        **config_facts(type(instance).__name__, config, inner, STATE.recorder.config.draft_max_length),
    ))
    if d2t is None or offsets is not None:  # a map on a device is not read: coverage then stays unknown
        kind, hot = hot_ids(draft_vocab, target_vocab, offsets)
        STATE.recorder.observe("draft_vocabulary", DraftVocabulary(
            type(instance).__name__, draft_vocab, target_vocab, kind, hot))


def load_weights_wrapper_for(where: str):
    """A wrapper for a draft class's load_weights; `where` names its internal-error site."""

    def load_weights_wrapper(wrapped, instance, args, kwargs):
        if not STATE.active:
            return wrapped(*args, **kwargs)
        names, kept = [], {}
        row = draft_class(type(instance).__name__)
        if args:
            args = (_tap_names(args[0], names, kept, row),) + tuple(args[1:])
        elif "weights" in kwargs:
            kwargs = dict(kwargs, weights=_tap_names(kwargs["weights"], names, kept, row))
        result = wrapped(*args, **kwargs)
        try:
            _observe_loaded(instance, names, kept)
        except Exception as exc:
            STATE.report_error(where, exc)
        return result

    return load_weights_wrapper
