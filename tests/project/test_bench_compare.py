"""``bench.compare``'s tables: medians over runs, after / before the median of the runs' ratios."""

from __future__ import annotations

from bench import compare


def decisions(us: float, cpu: float) -> dict[str, object]:
    row = {"median_us": us, "cpu_median_us": cpu, "ping_ratio": us / 100}
    return {"speed": {"fixed_window: Policy.hit": row}, "flood": {"rows": {}}}


def test_after_over_before_is_the_median_of_each_runs_ratio():
    assert compare.compared([100.0, 200.0, 300.0], [50.0, 300.0, 330.0], ".1f") == [
        "200.0",
        "300.0",
        "1.100 (0.500-1.500)",
    ]
    assert compare.compared([None], [1.0], ".1f") == ["", "", ""]


def test_the_table_has_a_row_per_row_found_in_both_checkouts(capsys):
    before = [decisions(100.0, 50.0), decisions(110.0, 55.0)]
    after = [decisions(90.0, 45.0), decisions(99.0, 44.0)]
    after[0]["speed"]["INCRBY on django_rl's kept connection"] = {  # type: ignore[index]
        "median_us": 1.0,
        "cpu_median_us": 1.0,
        "ping_ratio": 0.01,
    }
    compare.report(
        {
            "checkouts": {"before": "/b", "after": "/a"},
            "options": {"decisions": ["--quick"]},
            "runs": {"decisions": {"before": before, "after": after}},
        }
    )
    printed = capsys.readouterr().out
    assert "| fixed_window: Policy.hit | 105.0     | 94.5  | 0.900 (0.900-0.900)" in printed
    assert "INCRBY" not in printed  # only in one checkout
