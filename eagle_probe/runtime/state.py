"""Process-wide probe state shared by the wrappers: whether the probe is on, and its recorder."""



class ProbeState:
    def __init__(self):
        self.active = False
        self.recorder = None  # type: Optional["eagle_probe.recorder.Recorder"]
        self.inner_forward = True

    def report_error(self, where: str, exc: BaseException) -> None:
        """Count and log once; never raises (this is the last line of defence)."""
        try:
            if self.recorder is not None:
                self.recorder.internal_error(where, exc)
        except Exception:
            pass


STATE = ProbeState()
