"""Draft-vs-target agreement over the dumped rows, for one wiring or many.

Computed once: the target's greedy tokens at t + 1 (its lm_head over the dumped final hidden states), the draft's
embedding lookups and their half of layer 0's q/k/v, the rope tables and the attention layout. Per wiring: one fc
and the decoder layer(s) and lm_head over every row; several wirings share one pass (their rows stacked) up to a
row budget. A wiring's score: how many proposals equal the target's token, out of how many positions, and the mean
log-probability the draft gives the target's token (over the positions its vocabulary holds: the same ones under
every wiring), a finer measure than the count for telling near-ties apart.
"""

import time
from collections.abc import Sequence

import torch

from .draft import TorchDraft
from .dumps import DumpRows

ROW_BUDGET = {"cpu": 4096, "cuda": 16384}  # rows per pass when several wirings are stacked
Score = tuple[int, int, float | None]  # (correct, positions, mean log-probability of the target's token)


def greedy_tokens(final_hidden: torch.Tensor, lm_head: torch.Tensor, device, vocab_rows: int = 16384) -> torch.Tensor:
    """argmax(final_hidden @ lm_head.T) per row, over vocabulary chunks (the head stays in its stored dtype and is
    cast a chunk at a time); the first maximum wins, as torch.argmax."""
    x = final_hidden.to(device=device, dtype=torch.float32)
    best = torch.full((x.shape[0],), -float("inf"), device=device)
    arg = torch.zeros(x.shape[0], dtype=torch.long, device=device)
    for start in range(0, lm_head.shape[0], vocab_rows):
        chunk = lm_head[start:start + vocab_rows].to(device=device, dtype=torch.float32)
        values, index = (x @ chunk.T).max(-1)
        better = values > best
        best = torch.where(better, values, best)
        arg = torch.where(better, index + start, arg)
    return arg


class Evaluator:
    def __init__(self, draft: TorchDraft, rows: DumpRows, target_head: torch.Tensor, device):
        self.draft, self.rows, self.device = draft, rows, torch.device(device)
        started = time.perf_counter()
        with torch.no_grad():
            self.labels = rows.label_ids.to(self.device) if rows.label_ids is not None else \
                greedy_tokens(rows.label_states, target_head, self.device)
            self.label_draft_ids = draft.draft_ids(self.labels)
            self.prepared = draft.prepare(rows.next_tokens, rows.positions, rows.segments)
        self.layers: dict[int, torch.Tensor] = {i: t.to(self.device) for i, t in rows.layers.items()}
        self.setup_s = time.perf_counter() - started
        self.evaluated = 0
        self.seconds = 0.0
        self._tiled: dict[int, object] = {}

    @property
    def positions(self) -> int:
        return self.rows.evaluated_positions

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _scores(self, hits: torch.Tensor, log_probs: torch.Tensor, copies: int) -> list[Score]:
        held = self.label_draft_ids >= 0
        kept = int(held.sum())
        correct = hits.view(copies, -1).sum(-1).tolist()
        sums = log_probs.view(copies, -1)[:, held].sum(-1).tolist() if kept else [None] * copies
        return [(int(c), self.positions, s / kept if kept else None) for c, s in zip(correct, sums)]

    def score(self, aux: torch.Tensor) -> Score:
        """The score of aux states given directly, e.g. the served ones."""
        with torch.no_grad():
            hits, log_probs = self.draft.judge(aux.to(self.device), self.prepared, self.labels, self.label_draft_ids)
        return self._scores(hits, log_probs, 1)[0]

    def likelihood_margin(self, better: Sequence[int], other: Sequence[int]) -> tuple[float, float, int] | None:
        """(mean, standard error, positions) of the per-position difference in log p(target's token) between two
        wirings, paired over the same positions (those the draft's vocabulary holds); None with fewer than two."""
        held = self.label_draft_ids >= 0
        n = int(held.sum())
        if n < 2:
            return None
        with torch.no_grad():
            per_wiring = [self.draft.judge(torch.cat([self.layers[i] for i in w], dim=-1), self.prepared,
                                           self.labels, self.label_draft_ids)[1][held] for w in (better, other)]
        diff = (per_wiring[0] - per_wiring[1]).double()
        return float(diff.mean()), float(diff.std() / n ** 0.5), n

    def evaluate(self, wirings: Sequence[Sequence[int]]) -> list[Score]:
        """The score per wiring, each slot's states taken from the dump's hidden_states.I."""
        n = self.positions
        per_pass = max(1, ROW_BUDGET.get(self.device.type, 4096) // max(n, 1))
        out: list[Score] = []
        self._sync()
        started = time.perf_counter()
        with torch.no_grad():
            for at in range(0, len(wirings), per_pass):
                group = list(wirings[at:at + per_pass])
                copies = len(group)
                if copies not in self._tiled:
                    self._tiled[copies] = self.draft.tile(self.prepared, copies)
                aux = torch.cat([torch.cat([self.layers[i] for i in w], dim=-1) for w in group])
                hits, log_probs = self.draft.judge(aux, self._tiled[copies], self.labels.repeat(copies),
                                                   self.label_draft_ids.repeat(copies))
                out += self._scores(hits, log_probs, copies)
        self._sync()
        self.seconds += time.perf_counter() - started
        self.evaluated += len(wirings)
        return out
