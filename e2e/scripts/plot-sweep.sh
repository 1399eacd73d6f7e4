#!/usr/bin/env bash
# Plots target/bench/sweep.json (the bench's node-count sweep) into docs/bench/sweep.png with
# matplotlib, installed once into a virtualenv in the cache at the versions e2e/plot/requirements.txt
# pins (no dependency resolved on the day).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPO_DIR=$(cd "$E2E_DIR/.." && pwd)
requirements=$E2E_DIR/plot/requirements.txt
want=$(sha256sum < "$requirements" | cut -d' ' -f1)
venv=$TETHER_CACHE/plot-venv-${want:0:12}
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.installed" ]]; then
  command -v python3 >/dev/null || die "python3 is not installed; the plot is drawn with matplotlib"
  log "installing matplotlib into $venv (once)"
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install --quiet --no-deps -r "$requirements" || die "pip could not install $requirements"
  touch "$venv/.installed"
fi
source_json=${1:-$REPO_DIR/target/bench/sweep.json}
out=${2:-$REPO_DIR/docs/bench/sweep.png}
[[ -f "$source_json" ]] || die "$source_json is missing: run make bench-sweep first"
mkdir -p "$(dirname "$out")"
"$venv/bin/python" "$E2E_DIR/plot/plot_sweep.py" "$source_json" "$out"
log "plotted $source_json into $out"
