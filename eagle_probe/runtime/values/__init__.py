"""Hidden-state values at run time: sampled fingerprints of the aux slots (queued on the device, read without a
synchronisation) and opt-in dumps written by a background thread."""
