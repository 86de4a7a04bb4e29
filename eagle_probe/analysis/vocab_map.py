"""The draft's vocabulary map (d2t): pure rules, shared by `eagle-probe doctor` and the running probe.

An EAGLE-3 draft may predict over a smaller vocabulary than its target (`draft_vocab_size` < the target's
`vocab_size`). Its checkpoint then carries `d2t`, a tensor of `draft_vocab_size` integer offsets: draft id i is
target id i + d2t[i] (SGLang: `hot_token_id = d2t + arange(len)`, llama_eagle3.py). Without it SGLang keeps
`hot_token_id = None` and uses draft ids as target ids without a size check, so every proposal is a wrong token
(acceptance near zero) and target ids >= draft_vocab_size can never be proposed.
"""

from collections.abc import Sequence

from .findings import DRAFT_VOCAB_MAP_INVALID, DRAFT_VOCAB_MAP_MISSING, Finding, _finding

SHOWN = 5  # example ids a message names

FIX = ("ship the d2t tensor the training wrote with the draft's checkpoint (SpecForge builds it with its vocabulary "
       "mapping, `generate_vocab_mapping_file`, and saves it as `d2t` beside the weights), or train the draft over the "
       "target's full vocabulary (draft_vocab_size = vocab_size)")


def needs_map(draft_vocab_size: int | None, target_vocab_size: int | None) -> bool:
    """A map is needed only when the draft predicts over fewer ids than the target has (None: lm_head from the
    target, the full vocabulary)."""
    return draft_vocab_size is not None and target_vocab_size is not None and draft_vocab_size < target_vocab_size


def map_missing_finding(model_class: str, draft_vocab_size: int, target_vocab_size: int, where: str) -> Finding:
    never = target_vocab_size - draft_vocab_size
    return _finding(
        DRAFT_VOCAB_MAP_MISSING,
        f"{model_class}: draft_vocab_size {draft_vocab_size} is smaller than the target's vocab_size "
        f"{target_vocab_size}, but {where} carries no d2t map. SGLang then uses draft ids as target ids without a "
        f"word: the draft proposes the wrong tokens (acceptance near zero) and {never} target ids "
        f"({draft_vocab_size}..{target_vocab_size - 1}) can never be proposed. Fix: {FIX}.",
        model_class=model_class, draft_vocab_size=draft_vocab_size, target_vocab_size=target_vocab_size,
        never_proposed=never, source=where)


def map_problems(d2t: Sequence[int], draft_vocab_size: int | None, target_vocab_size: int) -> dict:
    """What is wrong with a d2t map: {"length": (len, expected) or None, "out_of_range": [(draft id, target id)],
    "out_of_range_count": n, "collisions": [(target id, [draft ids])], "collision_count": n}."""
    out_of_range: list[tuple] = []
    out_count = 0
    first_owner: dict[int, int] = {}
    collisions: dict[int, list[int]] = {}
    for draft_id, offset in enumerate(d2t):
        target_id = draft_id + int(offset)
        if not 0 <= target_id < target_vocab_size:
            out_count += 1
            if len(out_of_range) < SHOWN:
                out_of_range.append((draft_id, target_id))
            continue
        owner = first_owner.setdefault(target_id, draft_id)
        if owner != draft_id:
            collisions.setdefault(target_id, [owner]).append(draft_id)
    length = None
    if draft_vocab_size is not None and len(d2t) != draft_vocab_size:
        length = (len(d2t), draft_vocab_size)
    shown = sorted(collisions.items())[:SHOWN]
    return {"length": length, "out_of_range": out_of_range, "out_of_range_count": out_count,
            "collisions": [(t, ids[:SHOWN]) for t, ids in shown],
            "collision_count": sum(len(ids) - 1 for ids in collisions.values())}


def map_invalid_finding(model_class: str, problems: dict, draft_vocab_size: int | None, target_vocab_size: int,
                        where: str) -> Finding | None:
    parts = []
    if problems["length"]:
        got, expected = problems["length"]
        parts.append(f"it has {got} entries for a draft_vocab_size of {expected}")
    if problems["out_of_range_count"]:
        shown = ", ".join(f"draft id {d} -> {t}" for d, t in problems["out_of_range"])
        parts.append(f"{problems['out_of_range_count']} draft id(s) map outside the target's vocabulary "
                     f"[0, {target_vocab_size}) (target id = i + d2t[i]; e.g. {shown})")
    if problems["collision_count"]:
        shown = "; ".join(f"target id {t} <- draft ids {', '.join(map(str, ids))}" for t, ids in problems["collisions"])
        parts.append(f"{problems['collision_count']} draft id(s) map to a target id another draft id already maps to "
                     f"(e.g. {shown})")
    if not parts:
        return None
    return _finding(
        DRAFT_VOCAB_MAP_INVALID,
        f"{model_class}: the d2t map in {where} is not a map from the draft's vocabulary into the target's: "
        f"{'; '.join(parts)}. SGLang applies it unchecked: an id out of range fails or reads another token, two "
        f"draft ids for one target id waste a slot and lose another token. Fix: {FIX}; a d2t written for another "
        f"tokenizer or another draft_vocab_size must be rebuilt.",
        model_class=model_class, draft_vocab_size=draft_vocab_size, target_vocab_size=target_vocab_size,
        d2t_length=problems["length"][0] if problems["length"] else draft_vocab_size,
        out_of_range=problems["out_of_range_count"], out_of_range_examples=[list(p) for p in problems["out_of_range"]],
        collisions=problems["collision_count"],
        collision_examples=[[t, list(ids)] for t, ids in problems["collisions"]], source=where)


def vocab_map_findings(model_class: str, draft_vocab_size: int | None, target_vocab_size: int | None,
                       d2t: Sequence[int] | None, where: str = "the draft's checkpoint") -> list[Finding]:
    """draft_vocab_map_missing / draft_vocab_map_invalid, or nothing.

    draft_vocab_size None (SGLang loads the target's lm_head) or equal to the target's needs no map; a d2t given
    there is still checked when the target's size is known. d2t: the offsets (any integer sequence), None when the
    checkpoint has none."""
    if target_vocab_size is None:
        return []
    if d2t is None:
        if draft_vocab_size is None:
            return []  # the target's lm_head: the full vocabulary, no map
        if draft_vocab_size > target_vocab_size:
            return [_finding(
                DRAFT_VOCAB_MAP_INVALID,
                f"{model_class}: draft_vocab_size {draft_vocab_size} is larger than the target's vocab_size "
                f"{target_vocab_size} and {where} carries no d2t map: draft ids {target_vocab_size}.."
                f"{draft_vocab_size - 1} are no target ids. The draft was trained for another tokenizer, or the "
                f"config's draft_vocab_size is wrong.", model_class=model_class, draft_vocab_size=draft_vocab_size,
                target_vocab_size=target_vocab_size, source=where)]
        if needs_map(draft_vocab_size, target_vocab_size):
            return [map_missing_finding(model_class, draft_vocab_size, target_vocab_size, where)]
        return []
    finding = map_invalid_finding(model_class, map_problems(d2t, draft_vocab_size, target_vocab_size),
                                  draft_vocab_size, target_vocab_size, where)
    return [finding] if finding else []


def load_findings(model_class: str, draft_vocab_size: int | None, target_vocab_size: int | None,
                  d2t_size: int | None, problems: dict | None) -> list[Finding]:
    """The running probe's check at draft load, from plain values (DraftLoaded): d2t_size None when the checkpoint
    has no d2t; problems = map_problems(d2t, draft_vocab_size, target_vocab_size), computed once on the CPU copy of
    the d2t tensor while SGLang loads it (None: not computed)."""
    where = "the draft's checkpoint (as SGLang loaded it)"
    if d2t_size is None:
        return vocab_map_findings(model_class, draft_vocab_size, target_vocab_size, None, where)
    if problems is None or target_vocab_size is None:
        return []
    finding = map_invalid_finding(model_class, problems, draft_vocab_size, target_vocab_size, where)
    return [finding] if finding else []
