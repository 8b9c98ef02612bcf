"""bench/train_report.py's verdicts, on made-up results: with interleaved pairs the targets are
judged on the pairs' medians (one run against one local run is noise on the launch-bound small
model), and the time to first step at the largest delay against local + 2 s + model upload."""
import json
import subprocess
import sys

from conftest import ROOT


def result(step_ms, first_s, built=4.4, on_device=4.6):
    return {"step_ms_median": step_ms, "first_step_s": first_s, "losses": [4.3, 2.3], "round_trips_per_step": 1.0,
            "first_step_marks_s": {"model_built": built, "on_device": on_device, "first_step": first_s}}


def report(tmp_path, runs):
    (tmp_path / "train").mkdir(parents=True)
    for name, r in runs.items():
        (tmp_path / "train" / f"{name}.json").write_text(json.dumps(r))
    out = subprocess.run([sys.executable, str(ROOT / "bench/train_report.py"), str(tmp_path / "train"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    return {line.split(" | ")[1]: line for line in out.splitlines() if line.startswith("| small")}


def test_pairs_judge_the_step_ratio_and_single_runs_do_not(tmp_path):
    runs = {"small_local": result(10.0, 8.5), "small_local_again": result(11.0, 9.0),
            "small_rgpu_0ms_warm": result(12.0, 9.0)}  # 1.20 alone: one noisy sample
    for i, (lo, hi) in enumerate([(12.0, 12.5), (11.0, 11.5), (13.0, 12.0)], 1):
        runs[f"small_pair{i}_local"], runs[f"small_pair{i}_rgpu"] = result(lo, 9.0), result(hi, 9.2)
    rows = report(tmp_path, runs)
    assert "judged by the pairs" in rows["rgpu 0ms warm"] and "FAIL" not in rows["rgpu 0ms warm"]
    assert rows["3 interleaved pairs, 0 ms"].rstrip(" |").endswith("≤ 1.10 pass")  # 12.0 / 12.0


def test_pairs_fail_the_step_ratio_when_their_medians_miss(tmp_path):
    runs = {"small_local": result(10.0, 8.5)}
    for i in (1, 2, 3):
        runs[f"small_pair{i}_local"], runs[f"small_pair{i}_rgpu"] = result(10.0, 9.0), result(11.5, 9.2)
    assert "≤ 1.10 FAIL" in report(tmp_path, runs)["3 interleaved pairs, 0 ms"]


def test_single_runs_are_judged_when_there_are_no_pairs(tmp_path):
    rows = report(tmp_path, {"small_local": result(10.0, 8.5), "small_rgpu_0ms_warm": result(12.0, 9.0)})
    assert "≤ 1.10 FAIL" in rows["rgpu 0ms warm"]


def test_first_step_at_the_largest_delay_allows_two_seconds_plus_the_upload(tmp_path):
    def runs(far_first_s):
        r = {"small_local": result(10.0, 8.5)}
        for i in (1, 2, 3):
            r[f"small_pair{i}_local"], r[f"small_pair{i}_rgpu"] = result(10.0, 9.0), result(10.0, 9.1)
            r[f"small_pair{i}_rgpu30ms"] = result(40.0, far_first_s, built=4.4, on_device=5.4)  # upload 1.0 s
        return r
    row = "3 interleaved runs at the largest delay"
    assert "upload (1.00 s), judged per pair: pass" in report(tmp_path / "a", runs(11.9))[row]  # 9.0 + 2 + 1 = 12.0
    assert "upload (1.00 s), judged per pair: FAIL" in report(tmp_path / "b", runs(12.1))[row]


def test_first_step_is_judged_on_each_pair_against_its_own_local_run(tmp_path):
    # The host drifts (local 8, 9, 12 s): each far run over its own pair's local run is +4.5, +2.0
    # and +0.9 s, median +2.0: pass (2 s + 1 s upload); the medians' difference, 12.5 - 9 = +3.5 s,
    # would have failed.
    r = {"small_local": result(10.0, 8.0)}
    for i, (lo, far) in enumerate([(8.0, 12.5), (9.0, 11.0), (12.0, 12.9)], 1):
        r[f"small_pair{i}_local"], r[f"small_pair{i}_rgpu"] = result(10.0, lo), result(10.0, lo)
        r[f"small_pair{i}_rgpu30ms"] = result(40.0, far, built=4.4, on_device=5.4)
    row = report(tmp_path, r)["3 interleaved runs at the largest delay"]
    assert "+3.50 s over local's median" in row
    assert "+2.00 s the median over its pair's local run" in row and "judged per pair: pass" in row
