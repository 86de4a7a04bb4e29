"""`eagle-probe consistency`: the aux states of verify forwards' committed rows against a prefill of the same tokens
on the same server (command.py: the CLI; rows.py: what the dumps hold; reference.py: the server's prefill;
compare.py: the differences; the rule is eagle_probe/analysis/consistency.py)."""
