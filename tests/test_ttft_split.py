"""benchmarks/ttft_split.py: the grouping keys and the per-group table (synthetic rows, no fit report)."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("ttft_split", Path(__file__).resolve().parents[1] / "benchmarks" / "ttft_split.py")
ts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ts)


def _row(err, pub="A", lowest=False, meas_x=1.0, pred_x=1.0, inp="1000"):
    return {"err": err, "is_lowest": lowest, "meas_x": meas_x, "pred_x": pred_x,
            "c": {"publisher": pub, "input_tokens": inp, "load_kind": "concurrency", "max_concurrency": "8",
                  "num_prompts": "80"}}


def test_queue_class_reads_both_curves():
    assert ts.queue_class(_row(0, lowest=True)) == "lowest load (no queue)"
    assert ts.queue_class(_row(0, meas_x=4.0, pred_x=1.2)) == "measured queueing, sim not"
    assert ts.queue_class(_row(0, meas_x=1.0, pred_x=3.0)) == "sim queueing, measured not"
    assert ts.prompt_band(_row(0, inp="8000")) == "in>4096"
    assert ts.burst_class(_row(0)) == "steady (N/C >= 5)"


def test_table_rest_and_fixed_columns():
    rows = [_row(-0.5, "A"), _row(-0.6, "A"), _row(0.1, "B"), _row(0.2, "B"), _row(0.3, "B")]
    lines = ts.table(rows, lambda r: r["c"]["publisher"], 5)
    cols = {x.split()[0]: x.split()[1:] for x in lines[1:]}  # group: n, share, med|e|, signed, rest, if fixed
    assert cols["A"] == ["2", "40.0%", "55.0%", "-55.0%", "20.0%", "10.0%"]  # rest = B's 20%; A at 0 -> all 10%
    assert cols["B"] == ["3", "60.0%", "20.0%", "+20.0%", "55.0%", "0.0%"]
