"""The shape of one concern of the recorder. A part names the observation kinds it wants (`kinds`, each handled by
the method of the same name), and may take part in the periodic work: `flush` (counts into the Prometheus series),
`tick` (periodic events), `close` (at exit). It owns its state and its rules; it talks to the world only through
`self.out`. What the integrations reach of a part is an attribute the recorder names (runtime/recorder.py)."""


class Part:
    kinds = ()  # observation kinds handed to this part: the method of the same name is called with each

    def __init__(self, recorder):
        self.recorder = recorder  # for the process context (ranks) and the periodic clock
        self.out = recorder.out
        self.config = recorder.config
        self.rules = recorder.rules

    def family_of(self, obs):
        """The family row (eagle_probe.families) a capture set-up names; None without one (rule unverified, or an
        observation that names none: DeepSeek's rules from the version table then apply, as before families)."""
        name = getattr(obs, "family", None)
        if name is None:
            return None
        from ... import families, versions

        return families.family(name, versions.parse_version(self.recorder.sglang_version or ""))

    def flush(self, metrics) -> None:
        """Move what was counted since the last flush into the series (under the recorder's flush lock)."""

    def tick(self, now: float, final: bool = False) -> None:
        """Periodic events, once per summary interval; `final` at exit and uninstall."""

    def drain(self) -> None:
        """Finish what the hot path left for the flush thread (on that thread, and at the final flush)."""

    def flush_thread_started(self) -> None:
        """A flush thread now calls drain() every flush interval: work may wait for it instead of the hot path."""

    def close(self) -> None:
        """Finish background work before the final flush."""

    def forget(self) -> None:
        """Drop what was seen, so that the next observations are logged as new (tests)."""
