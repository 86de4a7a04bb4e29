"""What the verify dumps hold for `consistency`: per dumped request, the committed rows of its verify chain (row 0
and the accepted drafts), the tokens up to and including them, and their aux states."""

from dataclasses import dataclass

from ...dump_format import ACCEPTED, AUX, INPUT_IDS, POSITIONS, PREFIX_COUNTS, PREFIX_IDS, VERIFY_MODE
from ..dump_files import DumpError, read_dump_dir, server_of

NO_VERIFY_HINT = ("serve with EAGLE_PROBE_DUMP_MODES=extend,target_verify (eagle-probe run --dump-modes "
                  "extend,target_verify) and eager verify forwards (CUDA-graph replays are not dumped)")


@dataclass
class VerifyRows:
    """The committed rows of one request in one dumped verify forward."""

    path: str
    step: int  # the dump's target forward number in its process
    tp_rank: int
    tokens: tuple[int, ...]  # committed prefix + the committed rows: the sequence to prefill
    positions: tuple[int, ...]  # of the committed rows
    aux: object  # [rows, K*H] torch tensor, the served states
    hf_indices: tuple[int, ...]
    hidden_size: int
    dtype: str
    dump_every: int  # the server dumped every dump_every-th forward of a mode


@dataclass
class VerifySet:
    rows: list[VerifyRows]
    dumps: int  # verify dumps read
    unknown: int  # requests whose accepted rows were not known (not compared)
    skipped: list[tuple[str, str]]  # unreadable files
    release: str  # the SGLang release that served them (one: the reader refuses a mix)


def _requests(dump) -> list[VerifyRows]:
    t, meta = dump.tensors, dump.meta
    if ACCEPTED not in t or PREFIX_IDS not in t or PREFIX_COUNTS not in t:
        raise DumpError(f"dump {dump.path}: a {VERIFY_MODE} dump without {ACCEPTED}/{PREFIX_IDS}/{PREFIX_COUNTS}")
    accepted = [int(v) for v in t[ACCEPTED].tolist()]
    counts = [int(v) for v in t[PREFIX_COUNTS].tolist()]
    per = meta.get("rows_per_request")
    if not isinstance(per, int) or per < 1 or per * len(accepted) != dump.rows or len(counts) != len(accepted):
        raise DumpError(f"dump {dump.path}: rows_per_request {per!r} and {len(accepted)} requests do not make its "
                        f"{dump.rows} rows")
    ids, positions, prefix_ids = t[INPUT_IDS].tolist(), t[POSITIONS].tolist(), t[PREFIX_IDS].tolist()
    out, start = [], 0
    for j, (a, count) in enumerate(zip(accepted, counts)):
        prefix, start = prefix_ids[start:start + count], start + count
        first = j * per
        if a < 0 or count != int(positions[first]):
            continue  # not known: the writer did not see the step's resolution in time
        end = first + min(a, per - 1) + 1
        out.append(VerifyRows(dump.path, int(meta.get("step", 0)), int(meta.get("tp_rank") or 0),
                              tuple(int(v) for v in prefix + ids[first:end]),
                              tuple(int(v) for v in positions[first:end]), t[AUX][first:end],
                              dump.hf_indices, dump.hidden_size, str(meta.get("dtype", "")),
                              int(meta.get("dump_every") or 1)))
    return out


def read_verify_rows(path: str) -> VerifySet:
    """Every verify dump under `path`; DumpError when there is none or none has a committed row."""
    try:
        found = read_dump_dir(path, layers=False, modes=(VERIFY_MODE,))
    except DumpError as exc:
        raise DumpError(f"{exc}; consistency needs {VERIFY_MODE} dumps: {NO_VERIFY_HINT}") from None
    rows, unknown = [], 0
    for dump in found.dumps:
        known = _requests(dump)
        unknown += int(dump.meta.get("requests", len(known))) - len(known)
        rows.extend(known)
    if not rows:
        raise DumpError(f"--dump-dir {path}: {len(found.dumps)} {VERIFY_MODE} dump(s), but no request's committed rows "
                        f"are known in any (each request's verify step must be resolved within the probe's wait)")
    return VerifySet(rows, len(found.dumps), unknown, found.skipped, server_of(found.dumps[0])[0])
