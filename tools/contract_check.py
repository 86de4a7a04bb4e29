#!/usr/bin/env python3
"""Contract check over every SGLang release in the supported range (see eagle_probe/commands/contract/).

    .venv/bin/python tools/contract_check.py            # all releases from PyPI, wheels cached in .cache/sglang-wheels
    .venv/bin/python tools/contract_check.py 0.5.8 0.5.23
    .venv/bin/python tools/contract_check.py --installed   # the installed SGLang's source
    .venv/bin/python tools/contract_check.py --list        # the claims per release

Exit status 1 lists every broken (release, claim) pair.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from eagle_probe.commands.contract import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
