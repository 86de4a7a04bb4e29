"""Where the probe's facts go: JSON log lines and Prometheus metrics."""
