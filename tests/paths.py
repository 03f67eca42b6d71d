"""Where the installed `infersim` command is: beside the Python running the tests (any venv)."""

import shutil
import sys
from pathlib import Path

_beside = Path(sys.executable).with_name("infersim")
INFERSIM = str(_beside) if _beside.exists() else (shutil.which("infersim") or str(_beside))
