"""One quick calibration of the tiny GGUF through `infersim calibrate` (as tests/test_calibrate_cli.py runs it, into
a temporary INFERSIM_HOME), and the CLI test's held-out score: the median |log(predicted / measured)| over the
held-out probe points (the test allows log 2 = 0.69), the training points' median, the KV padding the fit priced
the probes with, and each held-out point's predicted / measured. Run it on two trees to compare a change
(docs/calibration.md, the CPU KV-padding rule: this tree against the commit before it).

    PYTHONPATH=. python benchmarks/calibrate_heldout.py [LABEL]
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
from pathlib import Path


def main(label: str = "") -> None:
    import yaml
    from typer.testing import CliRunner

    from calibrate.tiny_gguf import write_tiny_gguf
    from sim.cli import app

    tmp = Path(tempfile.mkdtemp())
    model = write_tiny_gguf(tmp / "tiny.gguf", n_ctx=2048, seed=0)
    env = {"INFERSIM_HOME": str(tmp / "home"), "COLUMNS": "120"}
    r = CliRunner().invoke(app, ["calibrate", "--model", str(model), "--name", "tiny-box", "--quick", "--threads",
                                 "1", "--json", "--force"], env=env)
    if r.exit_code != 0:
        raise SystemExit(r.output)
    cal = yaml.safe_load((tmp / "home" / "profiles" / "tiny-box.yaml").read_text())["calibration"]
    rows = [(p["id"], p["split"], p["predicted_s"] / p["measured_s"]) for p in cal["probe_points"]]
    held = [abs(math.log(x)) for _, s, x in rows if s == "heldout"]
    train = [abs(math.log(x)) for _, s, x in rows if s == "train"]
    print(label, "pad", cal["fit"]["attention_kv_padding"], "heldout median |log|", round(statistics.median(held), 3),
          "train median", round(statistics.median(train), 3),
          " ".join(f"{i}:{x:.2f}" for i, s, x in rows if s == "heldout"))


if __name__ == "__main__":
    main(*sys.argv[1:2])
