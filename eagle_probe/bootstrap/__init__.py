"""The directory that PYTHONPATH injection puts first: it holds only sitecustomize.py."""

import os

BOOTSTRAP_DIR = os.path.dirname(os.path.abspath(__file__))
