"""Row by row, slot by slot: the served verify rows against the prefill's rows at the same positions."""

from dataclasses import dataclass

from ...analysis.consistency import RowDiff, rel_diff
from ...dump_format import AUX, POSITIONS, VERIFY_MODE
from ..dump_files import DumpError


@dataclass
class Reference:
    """A prefill of a sequence's tokens: the server's EXTEND dump of them, or the offline target's forward."""

    name: str  # where it came from, for errors
    positions: list[int]  # of its rows
    aux: object  # [rows, K*H] torch tensor
    hf_indices: tuple[int, ...]

    @classmethod
    def of_dump(cls, dump) -> "Reference":
        return cls(f"dump {dump.path}", [int(v) for v in dump.tensors[POSITIONS].tolist()], dump.tensors[AUX],
                   tuple(dump.hf_indices))


def compare_rows(served, reference: Reference) -> list[RowDiff]:
    """RowDiffs of `served` (a rows.VerifyRows) against `reference`, a prefill of served.tokens."""
    if reference.positions != list(range(len(reference.positions))):
        raise DumpError(f"{reference.name}: the reference prefill does not start at position 0 (a cached prefix was "
                        f"used; /flush_cache did not take effect)")
    if tuple(reference.hf_indices) != tuple(served.hf_indices):
        raise DumpError(f"{reference.name}: captures hidden_states {list(reference.hf_indices)}, the verify dump "
                        f"{served.path} {list(served.hf_indices)}: not the same server configuration")
    hidden = served.hidden_size
    ref = reference.aux.double()
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
