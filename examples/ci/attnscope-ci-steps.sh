#!/usr/bin/env bash
# examples/ci/attnscope-ci-steps.sh: collect, then store (main) or check (pull request)
set -eu
STORE=${STORE:-.attnscope-store}
OUT=${OUT:-attnscope-out}
mkdir -p "$OUT"
# 1. collect a trace of this commit's attention (CPU runners: --device cpu)
python -m collectors --device cpu --variants "${VARIANT:-sdpa}" --active 10 --seq 128 --out "$OUT/trace"
cp "$OUT/trace/${VARIANT:-sdpa}.json.gz" "$OUT/candidate.json.gz"
if [ "${ROLE:-pr}" = main ]; then
  # 2a. on the main branch: store the trace as the baseline
  cp "$OUT/candidate.json.gz" "$OUT/main.json.gz"
  python -m dashboard ingest --store "$STORE" "$OUT/main.json.gz"
  python -m dashboard ls --store "$STORE"
  exit 0
fi
# 2b. on a pull request: gate against main's stored trace; keep the exit code for last
status=0
python -m dashboard check --store "$STORE" --baseline store:main.json.gz "$OUT/candidate.json.gz" \
  --json "$OUT/check.json" --junit "$OUT/check.xml" --markdown "$OUT/check.md" || status=$?
# 3. the HTML report, baseline against candidate (self-contained, offline)
python -m dashboard compare "$OUT/main.json.gz" "$OUT/candidate.json.gz" --html "$OUT/report.html" --no-store || true
exit $status
