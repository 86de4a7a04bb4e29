"""One replay, start to end: read the target's two tensors, the draft and the dumps, check that they fit together,
score the served wiring and (with --search) every candidate, and build the report dict."""

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...analysis import layers as layer_rules
from ...analysis.config_rules import LaunchSpec, TargetSpec, fix_for
from ...analysis.findings import Finding, WiringSearch, wiring_search_finding
from ...analysis.layers import capture_label
from ...analysis.wiring_search import (
    EXHAUSTIVE_LIMIT,
    Candidate,
    Choice,
    SearchResult,
    choose,
    count_wirings,
    search,
)
from ...versions import ResolvedSGLang, resolve_sglang
from .. import target_family
from ..output import finding_dict, finding_line, fix_lines
from .checkpoints import target_head_and_embedding
from .draft import TorchDraft, load_torch_draft
from .dumps import DumpRows, read_dumps
from .evaluate import Evaluator
from .spec import ReplayInputError


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ReplayInputError("--device cuda: no CUDA device is visible to torch here (use --device cpu)")
    return torch.device(name)


def parse_wiring(spec: str, slots: int) -> tuple[int, ...]:
    try:
        wiring = layer_rules.parse_trained_layers(spec)
    except ValueError as exc:
        raise ReplayInputError(f"--wiring {spec!r}: {exc}") from None
    if len(wiring) != slots:
        raise ReplayInputError(f"--wiring {spec!r}: {len(wiring)} layers, but the draft's fc takes {slots} aux states")
    return wiring


def check_fit(draft: TorchDraft, rows: DumpRows, target_head: torch.Tensor, draft_dir: str, target_dir: str):
    """The dumps, the draft and the target must agree on widths and vocabularies (SGLang would fail or feed garbage)."""
    s, first = draft.spec, rows.files[0]
    k = len(rows.served)
    if rows.hidden_size != s.target_hidden_size or k != s.num_aux:
        raise ReplayInputError(
            f"dump {first} holds {k} aux slots of width {rows.hidden_size} ({k * rows.hidden_size}), but the draft's "
            f"fc ({draft_dir}: fc.weight [{s.hidden_size}, {s.fc_in}]) takes {s.num_aux} x {s.target_hidden_size} = "
            f"{s.fc_in}: the draft does not belong to this server's target or capture configuration (SGLang reports "
            f"fc_width_mismatch)")
    if target_head.shape[-1] != rows.hidden_size:
        raise ReplayInputError(f"target {target_dir}: lm_head.weight is {list(target_head.shape)}, but the dumps' "
                               f"final_hidden_state is {rows.hidden_size} wide ({first}): another target")
    vocab = int(target_head.shape[0])
    if int(rows.next_tokens.max()) >= draft.w.embedding.shape[0]:
        raise ReplayInputError(f"dump {first}: token id {int(rows.next_tokens.max())} is outside the draft's "
                               f"embedding ({draft.w.embedding.shape[0]} rows, the {draft.w.embedding_source}'s)")
    if draft.w.d2t is not None:
        top = int((torch.arange(draft.w.d2t.shape[0], device=draft.w.d2t.device) + draft.w.d2t).max())
        if top >= vocab:
            raise ReplayInputError(f"draft checkpoint {draft_dir}: d2t maps to token id {top}, outside the target's "
                                   f"vocabulary of {vocab}")
    elif draft.w.lm_head.shape[0] > vocab:
        raise ReplayInputError(f"draft {draft_dir}: its lm_head has {draft.w.lm_head.shape[0]} rows, more than the "
                               f"target's vocabulary of {vocab}, and no d2t maps them")


def flops_per_wiring(s, positions: int, vocab_rows: int) -> int:
    """Matrix FLOPs of one wiring's pass: fc, the decoder layer(s) (layer 0's embedding half of q/k/v is cached) and
    the lm_head; attention scores are left out (small next to the projections for prompt-length requests)."""
    q, kv = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
    layer = s.hidden_size * (q + 2 * kv) + q * s.hidden_size + 3 * s.hidden_size * s.intermediate_size
    return 2 * positions * (s.fc_in * s.hidden_size + s.num_layers * layer + s.hidden_size * vocab_rows)


def _candidate(c: Candidate, n: int, reach=None) -> dict:
    lo, hi = c.interval
    out = {"hf_indices": list(c.hf_indices), "labels": [capture_label(i, n) for i in c.hf_indices],
           "accuracy": round(c.accuracy, 6), "correct": c.correct, "positions": c.positions,
           "ci95": [round(lo, 6), round(hi, 6)],
           "log_likelihood": round(c.likelihood_key, 6) if math.isfinite(c.likelihood_key) else None}
    if reach is not None:
        ids, why = reach
        out.update(ids=None if ids is None else list(ids), reachable=ids is not None, unreachable=why or None)
    return out


@dataclass(frozen=True)
class ReplayRequest:
    """What replay is asked (the `replay` command's options)."""

    draft_dir: str
    target_dir: str
    dump: str
    do_search: bool = False
    device_name: str = "cpu"
    draft_embedding: str | None = None
    wirings: Sequence[str] = ()
    sglang_version: str | None = None
    exhaustive_limit: int = EXHAUSTIVE_LIMIT

    @property
    def wants_layers(self) -> bool:
        return self.do_search or bool(self.wirings)


@dataclass
class Inputs:
    """The target's head, the draft and the dumps, read and checked to fit together."""

    release: ResolvedSGLang
    device: torch.device
    head: torch.Tensor
    target_config: dict
    resolved: target_family.TargetFamily
    draft: TorchDraft
    rows: DumpRows
    extra: list[tuple[int, ...]]  # the --wiring wirings to score too


@dataclass
class Scores:
    """The served wiring's score, the candidates and the choice among them."""

    evaluator: Evaluator
    served: Candidate
    searched: SearchResult | None
    result: SearchResult
    choice: Choice
    margin: tuple | None  # (mean, se, positions) of the best over the runner-up
    fix: dict
    finding: Finding


def replay(draft_dir: str, target_dir: str, dump: str, **options) -> dict:
    """Everything replay prints, as one dict (`options`: ReplayRequest's other fields). Raises ReplayInputError on
    bad input."""
    return run_replay(ReplayRequest(draft_dir, target_dir, dump, **options))


def run_replay(request: ReplayRequest) -> dict:
    started = time.perf_counter()
    notes: list[str] = []
    inputs = read_inputs(request, notes)
    scores = score(request, inputs, notes)
    return build_report(request, inputs, scores, notes, started)


def resolve_release(given: str | None, notes: list[str]) -> ResolvedSGLang:
    """The release whose capture rules decide the ids (versions.resolve_sglang: the given one, else the installed
    one); a given release that is not a release number is bad input."""
    release = resolve_sglang(given)
    if given is not None and not release.readable:
        raise ReplayInputError(f"--sglang-version {given!r}: not a release number such as 0.5.23")
    notes += [release.note] if release.note else []
    return release


def read_inputs(request: ReplayRequest, notes: list[str]) -> Inputs:
    device = resolve_device(request.device_name)
    release = resolve_release(request.sglang_version, notes)
    embed, head, target_config, tnotes = target_head_and_embedding(request.target_dir)
    notes += tnotes
    resolved = target_family.resolve(target_config, release.version)  # whose rule turns layers into ids to set
    if resolved.finding is not None:
        notes.append(f"target family: {resolved.finding.message}")
    if resolved.note:
        notes.append(resolved.note)
    draft = load_torch_draft(request.draft_dir, embed, head, request.draft_embedding, device)
    del embed  # the draft holds what it reads of it
    notes += list(draft.spec.notes) + draft.w.notes
    rows = read_dumps(request.dump, want_layers=request.wants_layers)
    check_fit(draft, rows, head, request.draft_dir, request.target_dir)
    extra = [parse_wiring(w, draft.spec.num_aux) for w in request.wirings]
    _check_layers(request, rows, extra)
    notes += _dump_notes(rows)
    return Inputs(release, device, head, target_config, resolved, draft, rows, extra)


def _check_layers(request: ReplayRequest, rows: DumpRows, extra) -> None:
    if (request.do_search or extra) and not rows.layer_indices:
        raise ReplayInputError(
            f"--dump-dir {request.dump}: the dumps hold the served aux states only (no hidden_states.I tensors); "
            f"{'--search' if request.do_search else '--wiring'} needs all-layer dumps: EAGLE_PROBE_DUMP_LAYERS=all "
            f"(SGLang 0.5.14+), which the target's layers write from eager forwards only: serve the dumped "
            f"prompts with --disable-cuda-graph (a forward replayed from a CUDA graph runs no layer's Python)")
    for wiring in extra:
        absent = [i for i in wiring if i not in rows.layers]
        if absent:
            raise ReplayInputError(f"--wiring {list(wiring)}: the dumps hold no hidden_states.{absent[0]} "
                                   f"(they hold {rows.layer_indices[0]}..{rows.layer_indices[-1]})")


def _dump_notes(rows: DumpRows) -> list[str]:
    notes = []
    if rows.cached_prefix_requests and rows.label_ids is None:
        notes.append(f"{rows.cached_prefix_requests} dumped request(s) started after cached tokens (chunked prefill "
                     f"or prefix cache): the draft's attention there sees the dumped tokens only")
    if rows.label_ids is not None:
        notes.append(f"labels from {len(rows.files)} verify dump(s)' target_next_ids: no prefill dump holds the "
                     f"final hidden state (forwards replayed from CUDA graphs); each verify chain is replayed without "
                     f"the committed tokens before it, so the draft's attention sees the chain only")
    if rows.unlabelled:
        notes.append(f"{len(rows.unlabelled)} dump(s) left out: no labels of the kind used (e.g. {rows.unlabelled[0]})")
    if rows.duplicates:
        notes.append(f"{len(rows.duplicates)} dump file(s) repeat a forward another rank wrote; read once")
    return notes


def _candidates(request: ReplayRequest, inputs: Inputs, evaluator: Evaluator, served: Candidate) -> SearchResult:
    rows = inputs.rows
    if request.do_search:
        return search(rows.layer_indices, inputs.draft.spec.num_aux, rows.served, evaluator.evaluate,
                      exhaustive_limit=request.exhaustive_limit)
    known = {wiring: Candidate(wiring, *evaluator.evaluate([wiring])[0]) for wiring in inputs.extra}
    known.setdefault(rows.served, served)
    return SearchResult("given", known, len(known), 0, rows.served)


def score(request: ReplayRequest, inputs: Inputs, notes: list[str]) -> Scores:
    rows, rules, n_layers = inputs.rows, inputs.release.rules, inputs.rows.num_layers
    evaluator = Evaluator(inputs.draft, rows, inputs.head, inputs.device)
    served = Candidate(rows.served, *evaluator.score(rows.aux))
    result = _candidates(request, inputs, evaluator, served)
    choice = choose(result, n_layers, rules, served=rows.served, family=inputs.resolved.family)
    runner_up, margin = choice.runner_up, None
    if runner_up is not None and math.isfinite(runner_up.likelihood_key) \
            and all(i in rows.layers for i in choice.best.hf_indices + runner_up.hf_indices):
        margin = evaluator.likelihood_margin(choice.best.hf_indices, runner_up.hf_indices)
    within_noise = None if margin is None else margin[0] < 2 * margin[1]  # under two standard errors
    fix = fix_for(TargetSpec(str(rows.meta.get("model_class") or "target"), n_layers, rows.hidden_size,
                             family=inputs.resolved.family), rules, LaunchSpec(), choice.best.hf_indices)
    finding = wiring_search_finding(WiringSearch(
        served=rows.served, served_accuracy=served.accuracy, served_positions=served.positions,
        best=choice.best.hf_indices, best_accuracy=choice.best.accuracy, best_positions=choice.best.positions,
        num_layers=n_layers, ids=choice.ids, unreachable=choice.unreachable, sglang_version=inputs.release.text,
        near_tie=any(c.hf_indices == rows.served for c in choice.near_ties), method=result.method,
        ties_reachable=sum(1 for ids, _ in choice.reachability.values() if ids is not None),
        margin_within_noise=within_noise))
    served_in_layers = result.candidates.get(rows.served)
    if served_in_layers is not None and served_in_layers.correct != served.correct:
        notes.append(f"the served wiring scores {served.correct} from aux_hidden_states but {served_in_layers.correct} "
                     f"from the hidden_states.I of the same layers: the aux states are not the layers' residual "
                     f"stream as dumped")
    return Scores(evaluator, served, result if request.do_search else None, result, choice, margin, fix, finding)


def _draft_part(request: ReplayRequest, draft: TorchDraft) -> dict:
    s = draft.spec
    return {"directory": request.draft_dir, "hidden_size": s.hidden_size, "target_hidden_size": s.target_hidden_size,
            "num_aux": s.num_aux, "fc_in": s.fc_in, "layers": s.num_layers, "norm_before_fc": s.norm_before_fc,
            "fc_norm": s.fc_norm, "rope": {"type": s.rope.kind, "theta": s.rope.theta,
                                           "rotary_dim": s.rope.rotary_dim, **dict(s.rope.params)},
            "embedding": draft.w.embedding_source, "lm_head": draft.w.lm_head_source,
            "vocab_rows": int(draft.w.lm_head.shape[0]), "d2t": draft.w.d2t is not None,
            "eagle_aux_hidden_state_layer_ids": None if s.layer_ids is None else list(s.layer_ids)}


def _best_part(sc: Scores, n_layers: int) -> dict:
    choice, margin = sc.choice, sc.margin
    within_noise = None if margin is None else margin[0] < 2 * margin[1]
    return {**_candidate(choice.best, n_layers, choice.reachability.get(choice.best.hf_indices)),
            "fix_notes": sc.fix["notes"], "likelihood_margin": None if margin is None else {
                "over": list(choice.runner_up.hf_indices), "mean": round(margin[0], 6), "se": round(margin[1], 6),
                "positions": margin[2], "within_noise": within_noise}}


def _cost(inputs: Inputs, sc: Scores, started: float) -> dict:
    evaluator = sc.evaluator
    per_wiring = evaluator.seconds / evaluator.evaluated if evaluator.evaluated else None
    return {"setup_s": round(evaluator.setup_s, 4), "evaluations": evaluator.evaluated,
            "evaluate_s": round(evaluator.seconds, 4),
            "seconds_per_wiring": None if per_wiring is None else round(per_wiring, 6),
            "flops_per_wiring": flops_per_wiring(inputs.draft.spec, inputs.rows.evaluated_positions,
                                                 int(inputs.draft.w.lm_head.shape[0])),
            "total_s": round(time.perf_counter() - started, 3)}


def build_report(request: ReplayRequest, inputs: Inputs, sc: Scores, notes: list[str], started: float) -> dict:
    rows, n_layers, choice, searched = inputs.rows, inputs.rows.num_layers, sc.choice, sc.searched
    head = inputs.head
    return {
        "sglang_version": inputs.release.text,
        "rules": target_family.rules_text(inputs.release.rules, inputs.resolved.family),
        "device": str(inputs.device),
        "draft": _draft_part(request, inputs.draft),
        "target": {"directory": request.target_dir, "vocab": int(head.shape[0]), "hidden_size": int(head.shape[1]),
                   "model_type": inputs.target_config.get("model_type"), "family": inputs.resolved.describe()},
        "dumps": {"path": request.dump, "files": len(rows.files), "duplicates": len(rows.duplicates),
                  "requests": rows.requests, "rows": rows.dumped_rows, "positions": rows.evaluated_positions,
                  "num_layers": n_layers, "layer_indices": rows.layer_indices,
                  "sglang_versions": rows.versions, "cached_prefix_requests": rows.cached_prefix_requests},
        "served": _candidate(sc.served, n_layers),
        "search": None if searched is None else {
            "method": searched.method, "slots": inputs.draft.spec.num_aux, "indices": len(rows.layer_indices),
            "wirings": count_wirings(len(rows.layer_indices), inputs.draft.spec.num_aux),
            "exhaustive_limit": request.exhaustive_limit,
            "evaluated": len(searched.candidates), "rounds": searched.rounds, "start": list(searched.start)},
        "best": _best_part(sc, n_layers),
        "top": _candidate(choice.top, n_layers),
        "near_ties": [_candidate(c, n_layers, choice.reachability[c.hf_indices]) for c in choice.near_ties],
        "candidates": [_candidate(c, n_layers) for c in sc.result.ranked(prefer=rows.served)],
        "finding": finding_dict(sc.finding),
        "cost": _cost(inputs, sc, started),
        "notes": notes,
        "exit_status": 0,
    }


def wiring_text(c: dict) -> str:
    return "HF " + ", ".join(str(i) for i in c["hf_indices"])


def _score(c: dict) -> str:
    lo, hi = c["ci95"]
    return f"{c['accuracy']:.3f} ({c['correct']}/{c['positions']}, 95% CI {lo:.3f}-{hi:.3f})"


def _likelihood(c: dict) -> str:
    value = c.get("log_likelihood")
    return "n/a" if value is None else f"{value:.4f}"


def render_text(r: dict, top: int = 10) -> str:
    d, t, u = r["draft"], r["target"], r["dumps"]
    out = [f"eagle-probe replay on {r['device']}: SGLang {r['sglang_version'] or '(newest rules)'}: {r['rules']}",
           f"draft   {d['directory']}: hidden {d['hidden_size']}, fc {d['num_aux']} x {d['target_hidden_size']} -> "
           f"{d['hidden_size']}, norm_before_fc {'on' if d['norm_before_fc'] else 'off'}, fc_norm "
           f"{'on' if d['fc_norm'] else 'off'}, {d['layers']} layer(s), rope {d['rope']['type']}, embedding "
           f"{d['embedding']}'s, lm_head {d['lm_head']}'s ({d['vocab_rows']} rows{', d2t' if d['d2t'] else ''})",
           f"target  {t['directory']}: vocabulary {t['vocab']}, hidden {t['hidden_size']}",
           f"dumps   {u['path']}: {u['files']} file(s), {u['requests']} request(s), {u['rows']} rows, {u['positions']} "
           f"positions with the next token in the same request; "
           + (f"layers {u['layer_indices'][0]}..{u['layer_indices'][-1]} of {u['num_layers']}" if u["layer_indices"]
              else "aux states only"),
           f"served  {wiring_text(r['served'])} ({'; '.join(r['served']['labels'])}): {_score(r['served'])}"]
    sr = r["search"]
    cost = r["cost"]
    if sr:
        per = cost["seconds_per_wiring"]
        out.append(f"search  {sr['method']}: {sr['indices']} indices ^ {sr['slots']} slots = {sr['wirings']} wirings"
                   + (f", {sr['rounds']} round(s) from {sr['start']}" if sr["method"] == "coordinate" else "")
                   + f"; {sr['evaluated']} evaluated in {cost['evaluate_s']:.2f} s"
                   + (f" ({per * 1000:.2f} ms per wiring)" if per else ""))
    shown = r["candidates"][:top]
    if len(r["candidates"]) > 1:
        out.append(f"  {'rank':>4}  {'wiring':<22} accuracy  95% CI         positions  log p(target token)")
        for i, c in enumerate(shown, 1):
            lo, hi = c["ci95"]
            out.append(f"  {i:>4}  {', '.join(map(str, c['hf_indices'])):<22} {c['accuracy']:.4f}    "
                       f"{lo:.3f}-{hi:.3f}    {c['positions']:<9}  {_likelihood(c)}")
        if len(r["candidates"]) > top:
            out.append(f"  ... {len(r['candidates']) - top} more (--format json lists all)")
    ties = r["near_ties"]
    if len(ties) > 1:
        out.append(f"near-ties of the best ({len(ties)}, intervals overlapping the top one's): " + "; ".join(
            f"{', '.join(map(str, c['hf_indices']))} {c['accuracy']:.3f} (log p {_likelihood(c)})"
            + ("" if c["reachable"] else " (unreachable)") for c in ties[:top]))
    b = r["best"]
    out.append(f"best    {wiring_text(b)} ({'; '.join(b['labels'])}): {_score(b)}")
    out += fix_lines("to capture it", b["ids"], b["unreachable"], b["fix_notes"])
    top_wiring = next(c for c in ties if c["hf_indices"] == r["top"]["hf_indices"]) if ties else None
    if top_wiring is not None and top_wiring["hf_indices"] != b["hf_indices"]:
        why = ("cannot be captured on this release" if not top_wiring["reachable"]
               else f"is a near-tie with a lower mean log-probability of the target's tokens "
                    f"({_likelihood(top_wiring)} against {_likelihood(b)})")
        out.append(f"  (the top candidate {wiring_text(top_wiring)} scores {top_wiring['accuracy']:.3f} but {why}; "
                   f"{wiring_text(b)} is the likeliest near-tie that can be captured)")
    m = b["likelihood_margin"]
    if m is not None:
        out.append(f"  the likeliest of the near-ties the release can capture: log p {m['mean']:+.4f} +- {m['se']:.4f} "
                   f"a position over the next, HF {', '.join(map(str, m['over']))} (paired standard error, "
                   f"{m['positions']} positions)"
                   + ("; within noise: dump more tokens to separate them" if m["within_noise"] else ""))
    for note in r["notes"]:
        out.append(f"note: {note}")
    f = r["finding"]
    out.append(finding_line(f))
    return "\n".join(out)
