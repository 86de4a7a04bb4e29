"""Hidden-state values: the sampled fingerprints of every aux slot (gauges and log lines), and the findings on them:
non-finite values, two slots carrying the same layer, a slot unlike the training data's (EAGLE_PROBE_REFERENCE)."""

from ...analysis import findings as rules_mod
from ...analysis.fingerprints import identical, moved, reference_mismatch
from ...analysis.layers import capture_label
from ...config import read_reference
from ...events import AUX_FINGERPRINTS
from ...observations import AuxFingerprint
from ..sinks.metrics import MetricsSink
from ..values.sampler import FingerprintSampler, deliver_ready
from .base import Part


def slot_label(fp: AuxFingerprint, num_layers) -> str:
    if fp.capture_index is None:
        return f"draft input slot {fp.slot}"
    return capture_label(fp.capture_index, num_layers)


def _short(value: float) -> float:
    """6 significant digits: what a reader compares (changes of 20 %, cosines), in a third of the characters."""
    return float(f"{value:.6g}")


class Values(Part):
    kinds = ("aux_sampled",)

    def __init__(self, recorder):
        super().__init__(recorder)
        interval = self.config.fingerprint_interval_s
        self.sampler = FingerprintSampler(interval) if interval > 0 else None
        self._logged = {}  # (role, slot) -> (rms, signature) last logged
        self._bucket = {}  # role -> summary-interval bucket of the last full log
        self._reported = set()  # (code, role, slot or slots) already reported as a finding
        self._reference = read_reference(self.config.reference) if self.config.reference else None

    def flush_thread_started(self):
        if self.sampler is not None:
            self.sampler.inline = False  # read on the flush thread from now on, off the forward's

    def drain(self):
        if self.sampler is not None and self.sampler.pending:
            deliver_ready(self.sampler, self.recorder)

    def aux_sampled(self, sample):
        """A sampled forward's fingerprints, read from host memory: gauges, log lines, value findings."""
        context, values = sample
        prints = [AuxFingerprint(context.role, slot, index, context.mode, context.step, context.tokens,
                                 width, rms, mean, absmax, nonfinite, signature)
                  for slot, (index, width, (rms, mean, absmax, nonfinite, signature))
                  in enumerate(zip(context.capture_indices, context.widths, values))]
        self.out.metric(MetricsSink.aux_fingerprints, prints)
        self._log(prints, context)
        for fp in prints:
            if fp.nonfinite and self._first(("nonfinite", fp.role, fp.slot)):
                self.out.finding(rules_mod.aux_nonfinite_finding(
                    fp.role, fp.slot, fp.capture_index, slot_label(fp, context.num_layers), fp.nonfinite,
                    fp.tokens, fp.width), fp.role)
        if self._reference is not None and context.role == "target":
            self._compare_reference(prints)
        for i, a in enumerate(prints):
            for b in prints[i + 1:]:
                key = ("identical", a.role, a.slot, b.slot)
                if key not in self._reported and identical((a.rms, a.mean, a.absmax, a.signature),
                                                           (b.rms, b.mean, b.absmax, b.signature)):
                    self._reported.add(key)
                    self.out.finding(rules_mod.aux_slots_identical_finding(
                        a.role, (a.slot, b.slot), (a.capture_index, b.capture_index)), a.role)

    def _first(self, key) -> bool:
        if key in self._reported:
            return False
        self._reported.add(key)
        return True

    def _compare_reference(self, prints):
        """Each live slot against the training data's same slot (once per slot)."""
        for fp in prints:
            key = ("reference", fp.role, fp.slot)
            if key in self._reported:
                continue
            mismatch = reference_mismatch(fp.slot, fp.rms, fp.signature, self._reference)
            if mismatch is None:
                continue
            self._reported.add(key)
            resembles = None if mismatch["resembles"] is None else f"slot {mismatch['resembles']}"
            self.out.finding(rules_mod.aux_value_mismatch_finding(
                fp.role, fp.slot, fp.capture_index, None, mismatch["cosine"], resembles,
                source=f"signature against EAGLE_PROBE_REFERENCE, rms ratio {mismatch['rms_ratio']:.3g}"), fp.role)

    def _log(self, prints, context):
        """One line for the forward's slots: every slot on first sight and once per summary interval (on the same
        forward on every rank: the bucket comes from the wall clock), a slot also when it moved beyond the change
        tolerance. One line, not one per slot: the rank's fields and the forward's are written once."""
        bucket = int(context.wall // self.config.summary_interval_s)
        log_all = self._bucket.get((context.role, context.source)) != bucket
        self._bucket[(context.role, context.source)] = bucket
        slots = []
        for fp in prints:
            key = (fp.role, fp.slot, context.source)
            last = self._logged.get(key)
            if not (log_all or last is None or moved(last, (fp.rms, fp.signature))):
                continue
            self._logged[key] = (fp.rms, fp.signature)
            slots.append({"slot": fp.slot, "capture_index": fp.capture_index,
                          "label": slot_label(fp, context.num_layers), "width": fp.width, "rms": _short(fp.rms),
                          "mean": _short(fp.mean), "absmax": _short(fp.absmax), "nonfinite": fp.nonfinite,
                          "signature": [round(v, 6) for v in fp.signature]})
        if slots:
            self.out.emit("info", AUX_FINGERPRINTS, role=context.role, mode=context.mode, step=context.step,
                          tokens=context.tokens, source=context.source, slots=slots)
