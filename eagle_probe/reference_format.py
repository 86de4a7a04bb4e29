"""The reference file `eagle-probe reference` writes and EAGLE_PROBE_REFERENCE names: its format tag and its
validation. Vocabulary: config.py validates with it, so it imports nothing of analysis/."""

REFERENCE_FORMAT = "eagle-probe-reference/1"


def parse_reference(data) -> list:
    """The slots of a reference file's JSON ({slot, rms, signature}); raises ValueError naming what is wrong."""
    if not isinstance(data, dict) or data.get("format") != REFERENCE_FORMAT:
        raise ValueError(f"not an eagle-probe reference (format {REFERENCE_FORMAT!r}, from `eagle-probe reference`)")
    slots = data.get("slots")
    if not isinstance(slots, list) or not slots:
        raise ValueError("no slots")
    for entry in slots:
        if not (isinstance(entry, dict) and isinstance(entry.get("rms"), (int, float))
                and isinstance(entry.get("signature"), list)):
            raise ValueError(f"slot entry {entry!r:.80} lacks rms or signature")
    return slots
