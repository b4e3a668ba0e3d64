#!/usr/bin/env bash
# planner validate on the CPU: the tiny sweep (tests/data/sweep_tiny_cpu.json:
# five plans, three of two ranks under mpirun: dp=2 ZeRO-1, tp=2 and pp=2 1F1B) runs, report.json has the documented keys and its
# errors are (predicted - measured) / measured of the runs' own result files;
# report.csv has one row per plan; the pictures are drawn when gnuplot is
# there, the pipeline plan's timeline from its exec trace among them. Bad
# input exits 2 and writes nothing.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
SWEEP="$ROOT/tests/data/sweep_tiny_cpu.json"
expect_exit 0 $P validate --help && expect_grep "Examples" "$TMP/out"

# Bad input: nothing written.
expect_bad_input $P validate /nonexistent/sweep.json -o "$TMP/v0"
echo '{"format": "planner-sweep", "version": 1, "plans": [{"name": "x", "half": "C", "model": "gpt2", "gpus": "1xH100"}]}' >"$TMP/bad.json"
expect_bad_input $P validate "$TMP/bad.json" -o "$TMP/v0" && expect_grep "half" "$TMP/err"
expect_bad_input $P validate "$SWEEP" -o "$TMP/v0" --only no-such-plan
expect_bad_input $P validate "$SWEEP" -o "$TMP/v0" --headroom lots
expect_bad_input $P validate "$SWEEP" -o /nonexistent/dir/v
expect_bad_input $P validate "$SWEEP" -o "$TMP/v0" --kernels --device cpu && expect_grep "kernels" "$TMP/err"
[ ! -e "$TMP/v0" ] || { echo "FAIL: report folder made on bad input"; fails=$((fails+1)); }

# Predictions alone need no runtime (commit them before the runs).
expect_exit 0 $P validate "$SWEEP" -o "$TMP/pred" --predict-only --no-plots --json
python3 - "$TMP/pred/report.json" "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
assert json.load(open(sys.argv[2])) == r, "--json prints report.json"
assert [p["status"] for p in r["plans"]] == ["not_run"] * 5
assert not any("trace_file" in p for p in r["plans"]), "no trace without a run"
assert all(p["predicted"]["step_seconds"] > 0 and p["measured"] is None for p in r["plans"])
assert all(p["causes"] is None for p in r["plans"]), "no causes without a run"
PY
# --gpus: the report's title says where the plans ran.
echo '{"format": "planner-sweep", "version": 1, "name": "one", "plans": [{"name": "x", "half": "A", "model": "gpt2", "gpus": "1xH100", "seq": 256, "global_batch": 4}]}' >"$TMP/one.json"
expect_exit 0 $P validate "$TMP/one.json" -o "$TMP/pred2" --predict-only --no-plots --gpus 1xH200
expect_grep "one, run on 1xH200 \(--gpus\)" "$TMP/out"

# The ranking check (--rank-question): its plans are planner plan's top K of
# that question, in plan's order; bad combinations exit 2 and write nothing.
Q="--model $ROOT/tests/data/tiny-gpt2.json --gpus 2xH100 --seq 64 --global-batch 8"
expect_bad_input $P validate "$SWEEP" --rank-question "$Q" -o "$TMP/r0" && expect_grep "one of the two" "$TMP/err"
expect_bad_input $P validate -o "$TMP/r0" && expect_grep "one of the two" "$TMP/err"
expect_bad_input $P validate "$SWEEP" --top 3 -o "$TMP/r0" && expect_grep "goes with --rank-question" "$TMP/err"
expect_bad_input $P validate --rank-question "$Q" --gpus 1xH200 -o "$TMP/r0" && expect_grep "in the question" "$TMP/err"
expect_bad_input $P validate --rank-question "$Q --strategy dp=2" -o "$TMP/r0" && expect_grep "'--strategy' is not an option" "$TMP/err"
expect_bad_input $P validate --rank-question "--gpus 2xH100" -o "$TMP/r0" && expect_grep "needs --model" "$TMP/err"
expect_bad_input $P validate --rank-question "$Q" --top 0 -o "$TMP/r0"
[ ! -e "$TMP/r0" ] || { echo "FAIL: report folder made on bad input"; fails=$((fails+1)); }
expect_exit 0 $P validate --rank-question "$Q" --top 3 -o "$TMP/rp" --predict-only --no-plots -q
expect_exit 0 $P plan $Q --top 3 --json -q
cp "$TMP/out" "$TMP/plan.json"
python3 - "$TMP/rp/report.json" "$TMP/plan.json" <<'PY' || fails=$((fails+1))
import json, sys
r, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert [p["name"] for p in r["plans"]] == ["rank1", "rank2", "rank3"]
assert [p["strategy"] for p in r["plans"]] == [p["strategy"] for p in plan["plans"]], "the ranking runs plan's top 3"
assert [p["predicted"]["step_seconds"] for p in r["plans"]] == [p["step_seconds"] for p in plan["plans"]]
g = r["ranking"]
assert r["question"].startswith("--model ") and g["plans"] == 3 and g["ran"] == 0 and g["pick"] == "rank1"
assert g["pick_ran"] is False and g["pick_is_measured_best"] is None and g["kendall_tau_b"] is None
assert [x["predicted_rank"] for x in g["rows"]] == [1, 2, 3] and all(x["measured_rank"] is None for x in g["rows"])
PY

if [ "${PLANNER_HAS_RUNTIME:-OFF}" != ON ] || ! command -v mpirun >/dev/null; then
  echo "runtime or mpirun missing: runs skipped"; finish; exit $?
fi
expect_exit 0 $P calibrate --device cpu --quick -q -o "$TMP/cpu.json"
start=$(date +%s)
expect_exit 0 $P validate "$SWEEP" -o "$TMP/v" --device cpu --oversubscribe --profile "$TMP/cpu.json"
echo "sweep took $(( $(date +%s) - start )) s"
expect_grep "half B \(held out\)" "$TMP/out"
expect_grep "^tiny-gpt2-dp2-zero1 +A +2 " "$TMP/out"
expect_grep "^  tiny-gpt2-pp2-1f1b: stage 0 .* stage 1 " "$TMP/out"
expect_grep "validate: \[5/5\]" "$TMP/err"
python3 - "$TMP/v" <<'PY' || fails=$((fails+1))
import json, os, sys
d = sys.argv[1]
r = json.load(open(os.path.join(d, "report.json")))
assert r["format"] == "planner-validation" and r["held_out"] == "B" and r["complete"] is True
names = [p["name"] for p in r["plans"]]
assert names == ["tiny-gpt2-fp32", "tiny-llama-gqa-ckpt-full", "tiny-gpt2-dp2-zero1", "tiny-gpt2-tp2",
                 "tiny-gpt2-pp2-1f1b"], names
by = {p["name"]: p for p in r["plans"]}
for p in r["plans"]:
    for k in ("strategy", "predicted", "measured", "half", "status", "errors"):
        assert k in p, k
    assert p["predicted"]["step_seconds"] > 0 and p["predicted"]["per_gpu_peak_bytes"] > 0
for n in names:
    p = by[n]
    assert p["status"] == "ran", (n, p["status"], p["error"])
    res = json.load(open(os.path.join(d, p["result_file"])))
    m = res["measurement"]
    step = m["step_seconds"]["median"]
    peak = max([m["memory"]["total_bytes"]] + [x["peak_bytes"] for x in m["ranks"]])
    assert p["measured"]["step_seconds"] == step and p["measured"]["per_gpu_peak_bytes"] == peak
    e = (p["predicted"]["step_seconds"] - step) / step * 100
    assert abs(p["errors"]["step_seconds_pct"] - e) < 1e-9 * max(1, abs(e)), (p["errors"], e)
    e = (p["predicted"]["per_gpu_peak_bytes"] - peak) / peak * 100
    assert abs(p["errors"]["per_gpu_peak_pct"] - e) < 1e-9 * max(1, abs(e))
    # The prediction is the one planner exec made with the same profile.
    assert abs(res["prediction"]["step_seconds"] - p["predicted"]["step_seconds"]) < 1e-12
assert by["tiny-gpt2-dp2-zero1"]["world"] == 2 and by["tiny-gpt2-dp2-zero1"]["measured"]["device"] == "cpu"
assert len(json.load(open(os.path.join(d, by["tiny-gpt2-dp2-zero1"]["result_file"])))["measurement"]["ranks"]) == 2
assert by["tiny-gpt2-tp2"]["world"] == 2
# The pipeline plan ran with --trace: both timelines in one Chrome trace, named in the report.
pp = by["tiny-gpt2-pp2-1f1b"]
assert pp["trace_file"] == "runs/tiny-gpt2-pp2-1f1b.trace.json" and "trace_file" not in by["tiny-gpt2-tp2"]
t = json.load(open(os.path.join(d, pp["trace_file"])))
pids = {e["pid"] for e in t["traceEvents"] if e.get("ph") == "X"}
assert {0, 1, 1000, 1001} <= pids, pids
# Its bubble per stage, predicted and measured (rank 0 is stage 0, rank 1 stage 1).
st = pp["bubble"]["stages"]
assert [x["stage"] for x in st] == [0, 1] and [[m["rank"] for m in x["measured"]] for x in st] == [[0], [1]], st
assert all(0 <= x["predicted_fraction"] < 1 and 0 <= x["measured"][0]["fraction"] < 1 for x in st), st
assert "bubble" not in by["tiny-gpt2-tp2"]
s = r["summary"]
assert s["A"]["ran"] == 3 and s["B"]["ran"] == 2 and s["all"]["plans"] == 5
errs = [abs(by[n]["errors"]["step_seconds_pct"]) for n in ("tiny-gpt2-fp32", "tiny-gpt2-dp2-zero1", "tiny-gpt2-pp2-1f1b")]
assert abs(s["A"]["step_seconds"]["mape_pct"] - sum(errs) / 3) < 1e-9 * max(errs)
rows = open(os.path.join(d, "report.csv")).read().splitlines()
assert len(rows) == 6 and rows[0].startswith("name,half,world,strategy,status"), rows[0]
if os.path.exists(os.path.join(d, "timeline_tiny-gpt2-pp2-1f1b.png")):
    assert "timeline_tiny-gpt2-pp2-1f1b.png" in r["files"], r["files"]
PY
if command -v gnuplot >/dev/null; then
  for f in step_time.png peak_memory.png memory_breakdown.png timeline_tiny-gpt2-pp2-1f1b.png; do
    [ -s "$TMP/v/$f" ] || { echo "FAIL: $f not drawn"; cat "$TMP/v/plots.log"; fails=$((fails+1)); }
  done
  [ ! -s "$TMP/v/plots.log" ] || { echo "FAIL: gnuplot complained:"; cat "$TMP/v/plots.log"; fails=$((fails+1)); }
else
  [ -s "$TMP/v/plots.gp" ] || { echo "FAIL: plots.gp not written"; fails=$((fails+1)); }
fi
# The ranking check runs: plan's top 2 on the CPU; tau-b and the pick's gap
# recomputed here from the report's own step times.
expect_exit 0 $P validate --rank-question "$Q" --top 2 -o "$TMP/rr" --device cpu --oversubscribe --profile "$TMP/cpu.json" --steps 2 --warmup 1
expect_grep "^Kendall's tau-b, predicted against measured step time: [+-]1.00" "$TMP/out"
expect_grep "^pick rank1: " "$TMP/out"
python3 - "$TMP/rr/report.json" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
g = r["ranking"]
assert g["ran"] == 2, [(p["name"], p["status"], p["error"]) for p in r["plans"]]
pred = [p["predicted"]["step_seconds"] for p in r["plans"]]
meas = [p["measured"]["step_seconds"] for p in r["plans"]]
# Two plans, no ties: tau-b is +1 when both orders agree, else -1.
want = 1.0 if (pred[0] - pred[1]) * (meas[0] - meas[1]) > 0 else -1.0
assert g["kendall_tau_b"] == want, (g, pred, meas)
assert g["pick_is_measured_best"] == (meas[0] <= meas[1])
assert abs(g["pick_gap_pct"] - (meas[0] - min(meas)) / min(meas) * 100) < 1e-9
assert g["measured_best"] == ("rank1" if meas[0] <= meas[1] else "rank2")
PY
if command -v gnuplot >/dev/null; then
  [ -s "$TMP/rr/ranking.png" ] || { echo "FAIL: ranking.png not drawn"; cat "$TMP/rr/plots.log"; fails=$((fails+1)); }
fi
finish
