"""Row by row, slot by slot: the served verify rows against the prefill's rows at the same positions."""

from typing import List

from ...analysis.consistency import RowDiff, rel_diff
from ...dump_format import AUX, POSITIONS, VERIFY_MODE
from ..dump_files import DumpError


def compare_rows(served, reference) -> List[RowDiff]:
    """RowDiffs of `served` (a rows.VerifyRows) against `reference` (the EXTEND Dump of served.tokens)."""
    ref_positions = [int(v) for v in reference.tensors[POSITIONS].tolist()]
    if ref_positions != list(range(len(ref_positions))):
        raise DumpError(f"dump {reference.path}: the reference prefill does not start at position 0 (a cached "
                        f"prefix was used; /flush_cache did not take effect)")
    if tuple(reference.hf_indices) != tuple(served.hf_indices):
        raise DumpError(f"dump {reference.path}: captures hidden_states {list(reference.hf_indices)}, the verify "
                        f"dump {served.path} {list(served.hf_indices)}: not the same server configuration")
    hidden = served.hidden_size
    ref = reference.tensors[AUX].double()
    out = []
    for row, position in enumerate(served.positions):
        x = served.aux[row].double()
        y = ref[position]
        for slot, hf_index in enumerate(served.hf_indices):
            a, b = x[slot * hidden:(slot + 1) * hidden], y[slot * hidden:(slot + 1) * hidden]
            value = rel_diff(float((a * b).sum()), float((a * a).sum()), float((b * b).sum()))
            out.append(RowDiff(slot, int(hf_index), VERIFY_MODE, int(position), served.step, served.tp_rank, value,
                               float((a - b).abs().max())))
    return out
