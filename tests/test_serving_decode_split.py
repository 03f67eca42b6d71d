"""calibrate/serving/decode_split.py: a TPOT/ITL miss split into the decode step (median ITL) and the
prompt-step stall (mean - median ITL)."""

from calibrate.serving.decode_split import decode_split, decode_split_markdown


def _rec(point, stat, measured, predicted, curve="c", load=100.0):
    return {"point": point, "curve_id": curve, "source": "s", "load": load, "quantity": "itl_ms",
            "statistic": stat, "measured": measured, "predicted": predicted}


def test_the_split_of_a_stall_dominated_miss_adds_up_to_the_mean_itl_miss():
    # measured: 18 ms steps, 20 ms of prompt-step stall per token; predicted: the step right, 2 ms of stall
    recs = [_rec("p", "median", 18.0, 17.5), _rec("p", "mean", 38.0, 19.5)]
    (row,) = decode_split(recs)
    assert row["step_miss_ms"] == -0.5
    assert row["stall_meas_ms"] == 20.0 and row["stall_pred_ms"] == 2.0
    assert row["step_miss_ms"] + row["stall_miss_ms"] == 19.5 - 38.0
    assert abs(row["stall_share"] - 18.0 / 18.5) < 1e-12
    assert abs(row["itl_mean_error"] - (19.5 / 38.0 - 1)) < 1e-12


def test_a_step_miss_without_stalls_has_no_stall_share():
    (row,) = decode_split([_rec("p", "median", 10.0, 6.0), _rec("p", "mean", 10.0, 6.0)])
    assert row["stall_share"] == 0.0 and row["step_error"] == -0.4


def test_points_within_the_threshold_or_without_both_statistics_are_left_out():
    recs = [_rec("close", "median", 10.0, 9.5), _rec("close", "mean", 10.0, 9.0),  # -10%: under 15%
            _rec("only_mean", "mean", 30.0, 10.0),  # no median ITL: nothing to split
            _rec("none", "median", 10.0, None), _rec("none", "mean", 30.0, 10.0),  # no prediction
            {**_rec("tpot", "mean", 30.0, 10.0), "quantity": "tpot_ms"},  # TPOT rows are not ITL rows
            {**_rec("tpot", "median", 30.0, 10.0), "quantity": "tpot_ms"}]
    assert decode_split(recs) == []
    assert "No load point" in "\n".join(decode_split_markdown(recs))


def test_the_report_section_lists_each_point_and_the_median_share():
    recs = [_rec("a", "median", 18.0, 18.0, "cur-a", 16.0), _rec("a", "mean", 28.0, 18.0, "cur-a", 16.0),
            _rec("b", "median", 20.0, 10.0, "cur-b", 1.0), _rec("b", "mean", 20.0, 10.0, "cur-b", 1.0)]
    md = "\n".join(decode_split_markdown(recs))
    assert "| cur-a | 16 | -36% | +0% | 10.0 / 0.0 | 100% |" in md
    assert "| cur-b | 1 | -50% | -50% | 0.0 / 0.0 | 0% |" in md
    assert "Median stall share over these 2 points: 50%." in md
