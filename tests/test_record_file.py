"""The rule records (benchmarks/serving/*_rule.json) are read by one function, calibrate/serving/record_file.py
`read_record`: a record with a figure missing is refused with the file and the field's key path, whichever rule's
loader reads it."""

import json

import pytest

from calibrate.serving import eager_backends_rule, eagerlaunch, floorkind


@pytest.mark.parametrize("loader, keys, match", [
    (eagerlaunch.load_record, ("runs", "run1", "after", "tpot_itl"), "runs.run1.after.tpot_itl"),
    (floorkind.load_record, ("families", "sglang", "by_kind", "tpot_itl"), "families.sglang.by_kind.tpot_itl"),
    (eager_backends_rule.load_record, ("on", "tpot_itl"), "on.tpot_itl"),
])
def test_a_record_missing_a_figure_is_refused_by_name(tmp_path, loader, keys, match):
    rec = loader()
    parent = rec
    for k in keys[:-1]:
        parent = parent[k]
    del parent[keys[-1]]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=match):
        loader(p)
