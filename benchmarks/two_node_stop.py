"""How long a two-node EAGLE-3 pair on this machine takes to stop on SIGTERM (to both nodes at once, as an
orchestrator stopping the launch does), with and without the probe; rounds alternate between the two.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/two_node_stop.py [--rounds N] [--json]

Each round starts the pair (sglang_cpu.node_pair), sends the "map" case's three requests to node 0, then stops it and
records the seconds until each node's scheduler (where the probe runs) and its whole process group have ended (None:
still there after SGLangServer's grace, STOP_GRACE_S, and killed).
"""

import argparse
import json
import statistics
import sys
import tempfile

from sglang_cpu.draft_models import build_case
from sglang_cpu.node_pair import start_two_node_pair, stop_pair


def one_round(root, name, case, probe):
    servers, _ = start_two_node_pair(root, name, case, probe=probe)
    prompts = case["expected"]["prompts"]
    for prompt, new in prompts.values():
        servers[0].generate_raw(prompt, max_new_tokens=new)
    return stop_pair(servers)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="two-node-stop-")
    case = build_case(root, "map", num_steps=2)
    runs = {"plain": [], "probe": []}
    for i in range(args.rounds):
        for label in ("plain", "probe"):
            runs[label].append(one_round(root, f"{label}{i}", case, probe=label == "probe"))
    if args.json:
        print(json.dumps(runs))
        return 0
    for label, stops in runs.items():
        for node in (0, 1):
            for part in ("scheduler", "group"):
                times = [s[node][part] for s in stops]
                done = [t for t in times if t is not None]
                median = f"median {statistics.median(done):.2f} s" if done else "never within the grace"
                print(f"{label:>5} node {node} {part:>9}: {times} ({median})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
