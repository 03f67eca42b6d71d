"""Test-suite settings shared by every test file.

Property tests explore random examples on a developer's machine (a new counterexample is a bug to
fix). Under CI (`CI` set, as `.ci/run` runs) hypothesis is derandomized, so a landing is judged on
the same examples every time and the suite's outcome is reproducible.
"""

import os
import sys
from pathlib import Path

from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/ helpers: paths, tiny_model, sim_helpers

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
