"""How the commands print what they found: one JSON object or text, a finding as one line, the ids that fix a
wiring. One place, so `doctor`, `replay`, `parity` and `summarize` say the same thing the same way."""

import json
from collections.abc import Callable


def emit(result: dict, fmt: str, render_text: Callable[[dict], str]) -> int:
    """Print `result` as one JSON object (--format json) or as text; the command's exit status."""
    print(json.dumps(result, indent=2, default=str) if fmt == "json" else render_text(result))
    return result["exit_status"]


def finding_line(finding) -> str:
    """A finding (a dict, or analysis' Finding) as "SEVERITY code: message"."""
    get = finding.get if isinstance(finding, dict) else lambda key: getattr(finding, key)
    return f"{get('severity').upper()} {get('code')}: {get('message')}"


def fix_lines(goal: str, ids: list | None, impossible: str | None, notes: list[str],
              key: str = "eagle_aux_hidden_state_layer_ids") -> list[str]:
    """The draft-config ids (`key`) that reach a wiring on this release, or why none can, and the caveats."""
    head = (f"{goal}: {key} = {ids}" if ids is not None
            else f"{goal}: impossible in this release: {impossible}")
    return [head] + [f"  but: {note}" for note in notes]


def finding_dict(finding) -> dict:
    """A finding as the commands' JSON reports give it."""
    return {"code": finding.code, "severity": finding.severity, "message": finding.message,
            "evidence": finding.evidence_dict()}
