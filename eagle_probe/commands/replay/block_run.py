"""`replay` for a DFlash (block-diffusion) draft: the draft of block_draft.py run on the probe's prefill dumps under
each candidate wiring (one HF hidden_states index per context feature its fc takes), scored by the accept length a
greedy chain verify would give, and the report (the same shape as the EAGLE-3 replay's where it makes sense).

Scoring (teacher forcing on the dumped prompts): for each dumped request (a prefill with no cached prefix) and each
anchor n >= 1 whose block labels are all dumped, the context is rows 0..n-1 of the request, the bonus token is the
input token at n, and the label of block position k (1..block-1) is the target's greedy token at n + k, i.e.
argmax(lm_head(final hidden state of row n + k - 1)). Per wiring: the agreement at each block position, and the
expected accept length 1 + mean number of leading agreeing positions (with a 95% interval from its standard error);
the mean log-probability the draft gives the labels breaks ties. Candidates rank by accept length.

The fix is `dflash_config.target_layer_ids` (id i captures HF hidden_states[i + 1]; the embedding output and the
final layer's output are out of reach: analysis.dflash_layers).
"""

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ...analysis import dflash_layers
from ...analysis.findings import TRAINED_LAYERS_INFERRED, WARNING, Finding, _labels
from ...analysis.layers import capture_label
from ...dump_format import AUX, EXTEND_MODE, FINAL, INPUT_IDS, POSITIONS
from ...layer_spec import parse_trained_layers
from ..block_drafts import FIX_KEY, ids_to_set
from ..dump_files import DumpError, read_dump_dir
from ..output import finding_dict, finding_line, fix_lines
from .block_draft import BlockDraft, load_block_draft, read_block_draft_spec
from .checkpoints import target_head_and_embedding
from .dumps import _distinct
from .evaluate import greedy_tokens
from .run import wiring_text
from .spec import ReplayInputError

SCORE_BUDGET = 1 << 22  # attention scores (queries x keys) per batch of anchors, per wiring and head
PASS_BUDGET = 1 << 25  # floats per pass when several wirings are stacked (scores of every head, or logits)
Z95 = 1.959964


# -- dumps ----------------------------------------------------------------------------------------------------


@dataclass
class BlockRows:
    """The rows of every dumped prefill request replay can use, concatenated, and the anchors."""

    directory: str
    files: list[str]
    duplicates: list[str]
    meta: dict
    served: tuple[int, ...]
    hidden_size: int
    num_layers: int
    tokens: torch.Tensor  # [R]
    positions: torch.Tensor  # [R]
    request_of: torch.Tensor  # [R] request number of each row
    aux: torch.Tensor  # [R, K*H] the served context features
    final: torch.Tensor  # [R, H]
    layers: dict[int, torch.Tensor]
    layer_indices: list[int]
    requests: list[tuple[int, int]]  # (first row, rows) per request kept
    cached_prefix_requests: int
    short_requests: int  # kept out: too short for one block
    versions: list[str] = field(default_factory=list)
    unlabelled: list[str] = field(default_factory=list)

    def features(self, wiring: Sequence[int], rows: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.layers[i][rows] for i in wiring], dim=-1)


def read_block_rows(path: str, block_size: int) -> BlockRows:
    found = read_dump_dir(path, layers=True, strict=True, modes=(EXTEND_MODE,))
    used, duplicates = _distinct(found.dumps)
    labelled = [d for d in used if d.has_final]
    unlabelled = [d.path for d in used if not d.has_final]
    if not labelled:
        raise DumpError(f"--dump-dir {path}: no prefill dump holds {FINAL} (e.g. {unlabelled[0]}): the DFlash replay "
                        f"labels each block with the target's greedy tokens over the dumped prompt, from eager "
                        f"prefill forwards (serve with --disable-cuda-graph)")
    parts = {"tok": [], "pos": [], "req": [], "aux": [], "final": []}
    layer_parts: dict[int, list[torch.Tensor]] = {}
    common = sorted(set.intersection(*(set(d.layer_indices) for d in labelled)))
    requests, cached, short, offset = [], 0, 0, 0
    for dump in labelled:
        for start, end, before in dump.requests:
            if before > 0:
                cached += 1
                continue
            if end - start < block_size:  # anchor 1 needs labels from rows 1..block-1
                short += 1
                continue
            rows = slice(start, end)
            parts["tok"].append(dump.tensors[INPUT_IDS][rows].to(torch.long))
            parts["pos"].append(dump.tensors[POSITIONS][rows].to(torch.long))
            parts["req"].append(torch.full((end - start,), len(requests), dtype=torch.long))
            parts["aux"].append(dump.tensors[AUX][rows].to(torch.float32))
            parts["final"].append(dump.tensors[FINAL][rows].to(torch.float32))
            for index in common:
                layer_parts.setdefault(index, []).append(dump.layers[index][rows].to(torch.float32))
            requests.append((offset, end - start))
            offset += end - start
    if not requests:
        raise DumpError(f"--dump-dir {path}: no dumped prefill request is usable: {cached} started after cached tokens "
                        f"(the draft's context would miss them) and {short} are shorter than the block size "
                        f"{block_size}")
    first = labelled[0]
    return BlockRows(
        directory=found.directory, files=[d.path for d in labelled], duplicates=duplicates, meta=first.meta,
        served=first.hf_indices, hidden_size=first.hidden_size, num_layers=first.num_layers,
        tokens=torch.cat(parts["tok"]), positions=torch.cat(parts["pos"]), request_of=torch.cat(parts["req"]),
        aux=torch.cat(parts["aux"]), final=torch.cat(parts["final"]),
        layers={i: torch.cat(layer_parts[i]) for i in common}, layer_indices=common, requests=requests,
        cached_prefix_requests=cached, short_requests=short,
        versions=sorted({str(d.meta.get("sglang_version")) for d in labelled}), unlabelled=unlabelled)


# -- scoring --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockScore:
    """One wiring's score over the anchors."""

    wiring: tuple[int, ...]
    per_position: tuple[float, ...]  # agreement at block positions 1..block-1
    accept_length: float  # 1 + mean leading agreeing positions
    se: float  # standard error of accept_length
    blocks: int
    log_likelihood: float  # mean log-probability of the labels

    @property
    def interval(self) -> tuple[float, float]:
        return self.accept_length - Z95 * self.se, self.accept_length + Z95 * self.se

    def overlaps(self, other: "BlockScore") -> bool:
        lo, hi = self.interval
        olo, ohi = other.interval
        return lo <= ohi and olo <= hi


@dataclass
class _Batch:
    ctx_rows: torch.Tensor  # [C] global rows of the context entries
    anchors: torch.Tensor  # [A] global rows of the anchors (the bonus tokens)
    mask: torch.Tensor  # [A*block, C + A*block]
    block_ids: torch.Tensor
    block_positions: torch.Tensor
    labels: torch.Tensor  # [A, block-1]


class BlockEvaluator:
    """The anchors, their labels and attention layouts, built once; a wiring's pass reruns the draft only."""

    def __init__(self, draft: BlockDraft, rows: BlockRows, device):
        started = time.perf_counter()
        self.draft, self.rows, self.device = draft, rows, torch.device(device)
        block = draft.spec.block_size
        greedy = greedy_tokens(rows.final, draft.lm_head, self.device).cpu()  # greedy[r]: the token after row r
        self.batches: list[_Batch] = []
        group: list[tuple[int, int, list[int]]] = []  # (first row, rows, anchors) per request in the batch
        cost = held = 0
        most = max(1, PASS_BUDGET // (block * int(draft.lm_head.shape[0])))  # anchors whose logits fit one pass
        for first, length in rows.requests:
            anchors = list(range(1, length - block + 2))  # labels from rows n..n+block-2
            step = max(1, min(most, SCORE_BUDGET // (block * (length + block)) // block))
            for at in range(0, len(anchors), step):
                chunk = anchors[at:at + step]
                q = block * len(chunk)
                this = q * (length + q)
                if group and (cost + this > SCORE_BUDGET or held + len(chunk) > most):
                    self.batches.append(self._batch(group, greedy))
                    group, cost, held = [], 0, 0
                group.append((first, length, chunk))
                cost, held = cost + this, held + len(chunk)
        if group:
            self.batches.append(self._batch(group, greedy))
        self.blocks = sum(int(b.anchors.shape[0]) for b in self.batches)
        largest = max(int(b.mask.numel()) for b in self.batches)
        per_wiring = max(largest * draft.spec.num_heads,
                         max(int(b.labels.numel()) for b in self.batches) * int(draft.lm_head.shape[0]))
        self.wirings_per_pass = max(1, PASS_BUDGET // per_wiring)
        self.setup_s = time.perf_counter() - started
        self.evaluated, self.seconds = 0, 0.0

    def _batch(self, group, greedy) -> _Batch:
        block, dev = self.draft.spec.block_size, self.device
        ctx_rows = torch.cat([torch.arange(first, first + length) for first, length, _ in group])
        anchors = torch.tensor([first + n for first, _, chunk in group for n in chunk])
        ctx_req = self.rows.request_of[ctx_rows]
        anchor_req = self.rows.request_of[anchors]
        # context row g is visible to the block at anchor row a: same request, g before a
        see_ctx = (ctx_req[None, :] == anchor_req[:, None]) & (ctx_rows[None, :] < anchors[:, None])
        blocks = torch.arange(len(anchors)).repeat_interleave(block)
        mask = torch.cat([see_ctx[blocks], blocks[:, None] == blocks[None, :]], dim=1)
        ids = self.draft.block_ids(self.rows.tokens[anchors])
        positions = (self.rows.positions[anchors][:, None] + torch.arange(block)).reshape(-1)
        labels = greedy[anchors[:, None] + torch.arange(block - 1)]  # position k's label: greedy after row n+k-1
        return _Batch(ctx_rows.to(dev), anchors.to(dev), mask.to(dev), ids.reshape(-1).to(dev),
                      positions.to(dev), labels.to(dev))

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _run(self, features) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """features(ctx_rows) -> [W, C, K*H]; per batch (hits [W, A, block-1], log p of labels [W, A, block-1])."""
        block = self.draft.spec.block_size
        out = []
        for b in self.batches:
            ctx = self.draft.context(features(b.ctx_rows.cpu()).to(self.device))
            hidden = self.draft.forward(ctx, self.rows.positions[b.ctx_rows.cpu()].to(self.device), b.block_ids,
                                        b.block_positions, b.mask)
            hidden = hidden.view(hidden.shape[0], -1, block, hidden.shape[-1])[:, :, 1:]
            logp = torch.log_softmax(self.draft.logits(hidden), dim=-1)
            hits = logp.argmax(-1) == b.labels
            out.append((hits, logp.gather(-1, b.labels.expand(logp.shape[0], -1, -1).unsqueeze(-1)).squeeze(-1)))
        return out

    def _scores(self, wirings, parts) -> list[BlockScore]:
        hits = torch.cat([h for h, _ in parts], dim=1)  # [W, A, block-1]
        logp = torch.cat([lp for _, lp in parts], dim=1)
        leading = hits.int().cumprod(dim=-1).sum(-1).double()  # [W, A]
        n = leading.shape[1]
        se = leading.std(dim=1) / math.sqrt(n) if n > 1 else torch.zeros(len(wirings))
        return [BlockScore(tuple(w), tuple(round(v, 6) for v in hits[i].double().mean(0).tolist()),
                           1 + float(leading[i].mean()), float(se[i]), n, float(logp[i].double().mean()))
                for i, w in enumerate(wirings)]

    def score_served(self) -> BlockScore:
        with torch.no_grad():
            parts = self._run(lambda rows: self.rows.aux[rows].unsqueeze(0))
        return self._scores([self.rows.served], parts)[0]

    def evaluate(self, wirings: Sequence[Sequence[int]]) -> list[BlockScore]:
        out: list[BlockScore] = []
        self._sync()
        started = time.perf_counter()
        with torch.no_grad():
            for at in range(0, len(wirings), self.wirings_per_pass):
                group = [tuple(w) for w in wirings[at:at + self.wirings_per_pass]]
                parts = self._run(lambda rows, g=group: torch.stack([self.rows.features(w, rows) for w in g]))
                out += self._scores(group, parts)
        self._sync()
        self.seconds += time.perf_counter() - started
        self.evaluated += len(wirings)
        return out


# -- one replay -----------------------------------------------------------------------------------------------


def parse_block_wiring(spec: str, slots: int, rows: BlockRows) -> tuple[int, ...]:
    try:
        wiring = parse_trained_layers(spec)
    except ValueError as exc:
        raise ReplayInputError(f"--wiring {spec!r}: {exc}") from None
    check_wiring(wiring, slots, rows, f"--wiring {spec!r}")
    return wiring


def check_wiring(wiring: Sequence[int], slots: int, rows: BlockRows, what: str = "wiring") -> None:
    """A wiring must name one HF index per context feature the draft's fc takes, each one the dumps hold."""
    if len(wiring) != slots:
        raise ReplayInputError(f"{what}: {len(wiring)} HF indices {list(wiring)}, but the DFlash draft's fc takes "
                               f"{slots} context features (one HF hidden_states index each)")
    absent = [i for i in wiring if i not in rows.layers]
    if absent:
        held = f"{rows.layer_indices[0]}..{rows.layer_indices[-1]}" if rows.layer_indices else "none"
        raise ReplayInputError(f"{what}: the dumps hold no hidden_states.{absent[0]} (HF index {absent[0]}; they hold "
                               f"{held} of {rows.num_layers} layers)")


def _candidate(c: BlockScore, n: int, reach: dict | None = None) -> dict:
    lo, hi = c.interval
    out = {"hf_indices": list(c.wiring), "labels": [capture_label(i, n) for i in c.wiring],
           "accept_length": round(c.accept_length, 6), "ci95": [round(lo, 6), round(hi, 6)],
           "per_position": list(c.per_position), "blocks": c.blocks,
           "log_likelihood": round(c.log_likelihood, 6) if math.isfinite(c.log_likelihood) else None}
    if reach is not None:
        out.update(ids=reach["ids"], reachable=reach["ids"] is not None, unreachable=reach["impossible"])
    return out


def _ranked(scores: Sequence[BlockScore], served: tuple[int, ...]) -> list[BlockScore]:
    return sorted(scores, key=lambda c: (-c.accept_length, -c.log_likelihood, c.wiring != served, c.wiring))


def _finding(served: BlockScore, best: BlockScore, n_layers: int, fix: dict, source: str, near_tie: bool,
             method: str, release: str | None) -> Finding:
    evidence = dict(served_hf=list(served.wiring), served_accept_length=round(served.accept_length, 6),
                    best_hf=list(best.wiring), best_accept_length=round(best.accept_length, 6), blocks=best.blocks,
                    fix_ids=fix["ids"], fix_key=FIX_KEY, fix_impossible=fix["impossible"], ids_source=source,
                    served_is_near_tie=near_tie, search=method, sglang_version=release)
    per = "/".join(f"{p:.2f}" for p in best.per_position)
    if served.wiring == best.wiring:
        return Finding(TRAINED_LAYERS_INFERRED, "info",
                       f"The DFlash draft agrees with the target best when its context is the served HF hidden_states "
                       f"{_labels(served.wiring, n_layers)}: expected accept length {served.accept_length:.3f} over "
                       f"{served.blocks} blocks (agreement per block position {per}; {method} search). The served "
                       f"wiring is the one it was trained on.", tuple(sorted(evidence.items())))
    named = "SGLang's silent default: the draft config names no target_layer_ids" if \
        source == dflash_layers.SOURCE_DEFAULT else f"from {source}"
    fix_text = (f'Set "dflash_config": {{"target_layer_ids": {fix["ids"]}}} in the draft\'s config.json'
                if fix["ids"] is not None else f"No target_layer_ids can feed it: {fix['impossible']}")
    tie = (" The served wiring's interval overlaps the best's: the dumps do not separate them; dump more tokens."
           if near_tie else "")
    return Finding(TRAINED_LAYERS_INFERRED, WARNING,
                   f"The DFlash draft agrees with the target best when its context is HF hidden_states "
                   f"{_labels(best.wiring, n_layers)}: expected accept length {best.accept_length:.3f} over "
                   f"{best.blocks} blocks (agreement per block position {per}), against "
                   f"{served.accept_length:.3f} for the served {_labels(served.wiring, n_layers)} ({named}; "
                   f"{method} search). It was likely trained on those layers. {fix_text}.{tie}",
                   tuple(sorted(evidence.items())))


def replay_block_draft(draft_dir: str, target_dir: str, dump: str, *, do_search: bool = False,
                       wirings: Sequence[str] = (), device: torch.device | str = "cpu",
                       release=None, notes: list[str] | None = None) -> dict:
    """Everything `replay` prints for a DFlash draft, as one dict. Raises ReplayInputError / DumpError on bad
    input."""
    started = time.perf_counter()
    notes = list(notes or [])
    device = torch.device(device)
    read_block_draft_spec(draft_dir)  # a draft replay cannot run is named before the target is read
    embed, head, target_config, tnotes = target_head_and_embedding(target_dir)
    notes += tnotes
    draft = load_block_draft(draft_dir, embed, head, device)
    del embed
    rows = read_block_rows(dump, draft.spec.block_size)
    slots, n_layers = draft.num_context, rows.num_layers
    first = rows.files[0]
    if rows.hidden_size != draft.spec.hidden_size or len(rows.served) != slots:
        raise ReplayInputError(
            f"dump {first} holds {len(rows.served)} context features of width {rows.hidden_size}, but the DFlash "
            f"draft's fc ({draft_dir}: fc.weight {list(draft.w['fc.weight'].shape)}) takes {slots} x "
            f"{draft.spec.hidden_size}: the draft does not belong to this server's target or capture configuration")
    if int(rows.tokens.max()) >= draft.embed.shape[0]:
        raise ReplayInputError(f"dump {first}: token id {int(rows.tokens.max())} is outside the target's embedding "
                               f"({draft.embed.shape[0]} rows): another target")
    extra = [parse_block_wiring(w, slots, rows) for w in wirings]
    if do_search and not rows.layer_indices:
        raise ReplayInputError(f"--dump-dir {dump}: the dumps hold the served context features only (no "
                               f"hidden_states.I tensors); --search needs all-layer dumps: EAGLE_PROBE_DUMP_LAYERS=all")
    configured = draft.spec.config
    expected_ids = configured.target_layer_ids or dflash_layers.default_target_layer_ids(
        n_layers, draft.spec.num_layers)
    if expected_ids is not None and tuple(i + 1 for i in expected_ids) != rows.served:
        notes.append(f"the dumps' served HF indices {list(rows.served)} are not what this draft config makes SGLang "
                     f"capture ({configured.source}: target_layer_ids {list(expected_ids)} -> HF "
                     f"{[i + 1 for i in expected_ids]}): the dumps come from another configuration")
    evaluator = BlockEvaluator(draft, rows, device)
    sc = _score_all(evaluator, rows, extra, do_search, release, configured.source, notes)
    _row_notes(rows, draft.spec.block_size, notes)
    run = _Run(draft_dir, target_dir, dump, draft, head, target_config, rows, device, release)
    return _report(run, evaluator, sc, notes, started)


@dataclass
class _Run:
    """What one DFlash replay read."""

    draft_dir: str
    target_dir: str
    dump: str
    draft: BlockDraft
    head: torch.Tensor
    target_config: dict
    rows: BlockRows
    device: torch.device
    release: object


@dataclass
class _Scores:
    served: BlockScore
    method: str
    evaluated: int
    ranked: list[BlockScore]
    ties: list[BlockScore]
    reach: dict
    best: BlockScore
    fix: dict
    finding: Finding


def _score_all(evaluator: BlockEvaluator, rows: BlockRows, extra, do_search: bool, release, source: str,
           notes: list[str]) -> _Scores:
    slots, n_layers = evaluator.draft.num_context, rows.num_layers
    served = evaluator.score_served()
    if do_search:
        candidates = list(itertools.product(rows.layer_indices, repeat=slots))
        method = "exhaustive"
    else:
        candidates = list(dict.fromkeys([*extra, rows.served])) if all(i in rows.layers for i in rows.served) \
            else list(dict.fromkeys(extra))
        method = "given"
    scored = {c.wiring: c for c in evaluator.evaluate(candidates)} if candidates else {}
    if rows.served not in scored:
        scored[rows.served] = served
    in_layers = scored[rows.served]
    if in_layers is not served and abs(in_layers.accept_length - served.accept_length) > 1e-6:
        notes.append(f"the served wiring scores accept length {served.accept_length:.4f} from the dumped context "
                     f"features (aux_hidden_states) but {in_layers.accept_length:.4f} from the hidden_states.I of the "
                     f"same layers: the served features are not the layers' residual stream as dumped")
    ranked = _ranked(list(scored.values()), rows.served)
    top = ranked[0]
    ties = [c for c in ranked if c.overlaps(top)]
    text = getattr(release, "text", None)
    reach = {c.wiring: ids_to_set(list(c.wiring), n_layers, text) for c in ties}
    reachable = [c for c in ties if reach[c.wiring]["ids"] is not None]
    best = sorted(reachable, key=lambda c: -c.log_likelihood)[0] if reachable else top
    fix = reach[best.wiring]
    near_tie = any(c.wiring == rows.served for c in ties)
    finding = _finding(served, best, n_layers, fix, source, near_tie, method, text)
    return _Scores(served, method, len(candidates), ranked, ties, reach, best, fix, finding)


def _row_notes(rows: BlockRows, block_size: int, notes: list[str]) -> None:
    if rows.cached_prefix_requests:
        notes.append(f"{rows.cached_prefix_requests} dumped request(s) started after cached tokens (chunked prefill "
                     f"or prefix cache) and were left out: the draft's context would miss those tokens")
    if rows.short_requests:
        notes.append(f"{rows.short_requests} dumped request(s) shorter than the block size {block_size} were left out")
    if rows.unlabelled:
        notes.append(f"{len(rows.unlabelled)} prefill dump(s) without {FINAL} left out (e.g. {rows.unlabelled[0]})")
    if rows.duplicates:
        notes.append(f"{len(rows.duplicates)} dump file(s) repeat a forward another rank wrote; read once")


def _report(run: _Run, evaluator: BlockEvaluator, sc: _Scores, notes: list[str], started: float) -> dict:
    draft_dir, target_dir, dump, draft, head, target_config, rows, device, release = (
        run.draft_dir, run.target_dir, run.dump, run.draft, run.head, run.target_config, run.rows, run.device,
        run.release)
    slots, n_layers, configured = draft.num_context, rows.num_layers, draft.spec.config
    served, best, fix, finding, ranked = sc.served, sc.best, sc.fix, sc.finding, sc.ranked
    do_search, method, top, ties, reach = sc.method == "exhaustive", sc.method, ranked[0], sc.ties, sc.reach
    s = draft.spec
    per = evaluator.seconds / evaluator.evaluated if evaluator.evaluated else None
    return {
        "kind": "dflash",
        "sglang_version": getattr(release, "text", None),
        "rules": dflash_layers.RULE_TEXT[dflash_layers.CAPTURE_PLUS_ONE],
        "device": str(device),
        "draft": {"directory": draft_dir, "architecture": "DFlashDraftModel", "hidden_size": s.hidden_size,
                  "layers": s.num_layers, "heads": s.num_heads, "kv_heads": s.num_kv_heads,
                  "block_size": s.block_size, "mask_token_id": s.mask_token_id, "num_context": slots,
                  "fc_in": slots * s.hidden_size,
                  "target_layer_ids": None if configured.target_layer_ids is None
                  else list(configured.target_layer_ids), "ids_source": configured.source,
                  "rope": {"type": s.rope.kind, "theta": s.rope.theta, "rotary_dim": s.rope.rotary_dim},
                  "embedding": "target", "lm_head": "target"},
        "target": {"directory": target_dir, "vocab": int(head.shape[0]), "hidden_size": int(head.shape[1]),
                   "model_type": target_config.get("model_type")},
        "dumps": {"path": dump, "files": len(rows.files), "duplicates": len(rows.duplicates),
                  "requests": len(rows.requests), "rows": int(rows.tokens.shape[0]), "blocks": evaluator.blocks,
                  "positions": evaluator.blocks * (s.block_size - 1), "num_layers": n_layers,
                  "layer_indices": rows.layer_indices, "sglang_versions": rows.versions,
                  "cached_prefix_requests": rows.cached_prefix_requests},
        "served": _candidate(served, n_layers),
        "search": None if not do_search else {
            "method": method, "slots": slots, "indices": len(rows.layer_indices),
            "wirings": len(rows.layer_indices) ** slots, "evaluated": sc.evaluated},
        "best": {**_candidate(best, n_layers, fix), "key": FIX_KEY},
        "top": _candidate(top, n_layers),
        "near_ties": [_candidate(c, n_layers, reach[c.wiring]) for c in ties],
        "candidates": [_candidate(c, n_layers) for c in ranked],
        "finding": finding_dict(finding),
        "cost": {"setup_s": round(evaluator.setup_s, 4), "evaluations": evaluator.evaluated,
                 "evaluate_s": round(evaluator.seconds, 4),
                 "seconds_per_wiring": None if per is None else round(per, 6),
                 "total_s": round(time.perf_counter() - started, 3)},
        "notes": notes,
        "exit_status": 0,
    }


# -- text -----------------------------------------------------------------------------------------------------


def _score(c: dict) -> str:
    lo, hi = c["ci95"]
    per = "/".join(f"{p:.3f}" for p in c["per_position"])
    return (f"accept length {c['accept_length']:.3f} (95% CI {lo:.3f}-{hi:.3f}, {c['blocks']} blocks; per position "
            f"{per})")


def render_block_text(r: dict, top: int = 10) -> str:
    d, t, u = r["draft"], r["target"], r["dumps"]
    ids = "none (SGLang's default)" if d["target_layer_ids"] is None else f"{d['target_layer_ids']} ({d['ids_source']})"
    out = [f"eagle-probe replay on {r['device']} (DFlash block draft): SGLang {r['sglang_version'] or '(newest rules)'}"
           f": the target {r['rules']}",
           f"draft   {d['directory']}: hidden {d['hidden_size']}, fc {d['num_context']} x {d['hidden_size']} -> "
           f"{d['hidden_size']}, {d['layers']} layer(s), block {d['block_size']} (mask token {d['mask_token_id']}), "
           f"rope {d['rope']['type']}, target_layer_ids {ids}; embedding and lm_head the target's",
           f"target  {t['directory']}: vocabulary {t['vocab']}, hidden {t['hidden_size']}",
           f"dumps   {u['path']}: {u['files']} prefill file(s), {u['requests']} request(s), {u['rows']} rows, "
           f"{u['blocks']} blocks ({u['positions']} drafted positions, teacher-forced); "
           + (f"layers {u['layer_indices'][0]}..{u['layer_indices'][-1]} of {u['num_layers']}" if u["layer_indices"]
              else "served features only"),
           f"served  {wiring_text(r['served'])} ({'; '.join(r['served']['labels'])}): {_score(r['served'])}"]
    sr, cost = r["search"], r["cost"]
    if sr:
        per = cost["seconds_per_wiring"]
        out.append(f"search  {sr['method']}: {sr['indices']} indices ^ {sr['slots']} slots = {sr['wirings']} wirings; "
                   f"{sr['evaluated']} evaluated in {cost['evaluate_s']:.2f} s"
                   + (f" ({per * 1000:.2f} ms per wiring)" if per else ""))
    if len(r["candidates"]) > 1:
        out.append(f"  {'rank':>4}  {'wiring':<14} accept  95% CI        per position        log p(target token)")
        for i, c in enumerate(r["candidates"][:top], 1):
            lo, hi = c["ci95"]
            per_pos = "/".join(f"{p:.2f}" for p in c["per_position"])
            ll = "n/a" if c["log_likelihood"] is None else f"{c['log_likelihood']:.4f}"
            out.append(f"  {i:>4}  {', '.join(map(str, c['hf_indices'])):<14} {c['accept_length']:.3f}   "
                       f"{lo:.3f}-{hi:.3f}   {per_pos:<19} {ll}")
        if len(r["candidates"]) > top:
            out.append(f"  ... {len(r['candidates']) - top} more (--format json lists all)")
    ties = r["near_ties"]
    if len(ties) > 1:
        out.append(f"near-ties of the best ({len(ties)}, intervals overlapping the top one's): " + "; ".join(
            f"{', '.join(map(str, c['hf_indices']))} {c['accept_length']:.3f}"
            + ("" if c["reachable"] else " (unreachable)") for c in ties[:top]))
    b = r["best"]
    out.append(f"best    {wiring_text(b)} ({'; '.join(b['labels'])}): {_score(b)}")
    out += fix_lines("to capture it", b["ids"], b["unreachable"], [], key=FIX_KEY)
    if r["top"]["hf_indices"] != b["hf_indices"]:
        out.append(f"  (the top candidate {wiring_text(r['top'])} scores {r['top']['accept_length']:.3f}; "
                   f"{wiring_text(b)} is the near-tie the release can capture with the highest log p of the "
                   f"target's tokens)")
    for note in r["notes"]:
        out.append(f"note: {note}")
    out.append(finding_line(r["finding"]))
    return "\n".join(out)
