"""A speculative server's acceptance counts three ways, to be compared: the probe's series (/metrics), SGLang's own
per-request meta_info, and (tests/e2e) the "map" case's construction; whether the TP ranks' last fingerprint samples
are of one forward (the divergence alert's condition); and an SGLangServer's processes by title.
Shared by the end-to-end tests and benchmarks/soak.py."""

SPEC_POSITIONS = 2  # the "map" case's chain: 2 speculative steps


def metric_samples(text, name):
    """[(labels dict, value)] of the series `name` in a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        head, value = line.rsplit(" ", 1)
        labels = {}
        if "{" in head:
            for part in head[head.index("{") + 1:head.rindex("}")].split('",'):
                if "=" in part:
                    key, raw = part.split("=", 1)
                    labels[key.strip()] = raw.strip().strip('"')
        out.append((labels, float(value)))
    return out


def last_samples_are_one_forward(texts):
    """Whether every TP rank's eagle_probe_aux_fingerprint_step gauge in these /metrics texts holds one step per
    role: the divergence alert compares the ranks' last samples only then. Samples follow wall-clock buckets, so a
    bucket boundary falling between two ranks' starts of one forward gives them neighbouring forwards; the next
    request gives them new last samples."""
    steps = {}
    for text in texts:
        for labels, value in metric_samples(text, "eagle_probe_aux_fingerprint_step"):
            steps.setdefault(labels.get("role"), set()).add(value)
    return bool(steps) and all(len(values) == 1 for values in steps.values())


def internal_errors(text):
    """where -> eagle_probe_internal_errors_total."""
    return {labels["where"]: value for labels, value in metric_samples(text, "eagle_probe_internal_errors_total")}


def probe_spec_counts(text, positions=SPEC_POSITIONS):
    """The probe's acceptance counters: drafts (request-steps), draft tokens, accepted tokens, per position."""
    def total(name):
        return sum(value for _, value in metric_samples(text, name))

    per_position = {labels.get("position"): value
                    for labels, value in metric_samples(text, "eagle_probe_spec_accepted_tokens_per_pos_total")}
    return {"drafts": total("eagle_probe_spec_drafts_total"),
            "draft_tokens": total("eagle_probe_spec_draft_tokens_total"),
            "accepted": total("eagle_probe_spec_accepted_tokens_total"),
            "per_position": [per_position.get(str(k), 0.0) for k in range(positions)]}


def counts_delta(after, before):
    return {key: ([a - b for a, b in zip(after[key], before[key])] if isinstance(after[key], list)
                  else after[key] - before[key]) for key in after}


def settled_probe_counts(server, positions=SPEC_POSITIONS, tries=6):
    """The probe's acceptance counters once two flushed scrapes in a row agree (a retried flush has landed)."""
    last = probe_spec_counts(server.flushed_metrics_text(), positions)
    for _ in range(tries):
        current = probe_spec_counts(server.flushed_metrics_text(), positions)
        if current == last:
            return current
        last = current
    return last


def sglang_spec_counts(metas, positions=SPEC_POSITIONS):
    """The same figures from SGLang's per-request meta_info: request-steps, proposed, correct, and per position
    k the steps whose accepted run reached k+1 (from spec_correct_drafts_histogram)."""
    per_position = [0] * positions
    for meta in metas:
        # a request that ran no verify step (max_new_tokens 1, or aborted before one) has no histogram
        for accepted, steps in enumerate(meta.get("spec_correct_drafts_histogram") or ()):
            for k in range(min(accepted, positions)):
                per_position[k] += steps
    return {"drafts": float(sum(m.get("spec_verify_ct", 0) for m in metas)),
            "draft_tokens": float(sum(m.get("spec_num_proposed_drafts", 0) for m in metas)),
            "accepted": float(sum(m.get("spec_num_correct_drafts", 0) for m in metas)),
            "per_position": [float(v) for v in per_position]}


def server_processes(server):
    """{"scheduler": psutil.Process, ...} of a running SGLangServer (by the titles SGLang gives its processes)."""
    import psutil

    out = {}
    for child in psutil.Process(server.proc.pid).children(recursive=True):
        try:
            title = child.name()
        except psutil.Error:
            continue
        if title.startswith("sglang::"):
            out.setdefault(title.split("::", 1)[1].split("_", 1)[0], child)
    return out
