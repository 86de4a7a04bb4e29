"""The report's "does speculation pay?" part: the merged estimate of the eagle_probe.spec.costs events
(commands/speculation_advice.py, the source `eagle-probe advise` prints in full), one line per batch-size bucket,
and its findings (speculation_slower_than_plain, speculation_depth_off) as findings of the first process counted."""

from ... import events as names
from ..speculation_advice import advice, why_nothing_estimated


def speculation_section(events: list) -> dict | None:
    """advise's result for these events; None where no process logged costs (phase timing off, or an older probe)."""
    if not any(e.get("event") == names.SPEC_COSTS for e in events):
        return None
    return advice(events)


def speculation_findings(section: dict | None) -> list[dict]:
    """The section's findings as finding events of the first process counted (the estimate is of all of them)."""
    if not section or not section["processes"]:
        return []
    where = section["processes"][0]
    return [{**finding, "event": names.FINDING, "role": "target", "tp_rank": where["tp_rank"],
             "pp_rank": where["pp_rank"], "dp_rank": where["dp_rank"], "pid": where["pid"],
             "timestamp": where["timestamp"]} for finding in section["findings"]]


def bucket_line(bucket: dict) -> str:
    if not bucket["estimated"]:
        return f"batch size {bucket['bucket']}: not estimated ({bucket['why']})"
    error = "?" if bucket["uncertainty"] is None else f"{bucket['uncertainty']:.2f}"
    extrapolated = " (extrapolated)" if bucket["recommended_extrapolated"] else ""
    return (f"batch size {bucket['bucket']}: {bucket['estimated_speedup']:.2f}x ± {error} of plain decoding; "
            f"{bucket['tokens_per_step']:.2f} tokens per step at depth {bucket['served_depth']}, "
            f"{bucket['break_even_accept_length']:.2f} would break even; best depth "
            f"{bucket['recommended_num_steps']}{extrapolated}")


def render_speculation_text(section: dict | None) -> list[str]:
    if not section:
        return []
    out = ["", f"Does speculation pay? (eagle_probe.spec.costs of {section['runs']} process(es), clock "
               f"{section['source']}; `eagle-probe advise` for the phase costs and the adaptive config):"]
    out += [f"  {bucket_line(bucket)}" for bucket in section["buckets"]]
    why = why_nothing_estimated(section)
    if why:
        out.append(f"  nothing estimated: {why}")
    return out + [f"  note: {note}" for note in section["notes"]]
