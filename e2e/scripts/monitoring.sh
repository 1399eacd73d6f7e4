#!/usr/bin/env bash
# deploy/monitoring/alerts.yaml is the one source of the alerting rules. This script
#   check  (make monitoring-check): extracts its spec (a plain rules file: `groups:`), runs
#          `promtool check rules` on it and `promtool test rules` on deploy/monitoring/tests/
#          (every alert needs a case where it fires and one where it stays quiet), checks that
#          every query of deploy/monitoring/dashboard.json parses, and fails when
#          charts/tether/files/alerts.yaml is not that spec or charts/tether/files/dashboard.json
#          not that dashboard;
#   sync   (make monitoring-sync): writes charts/tether/files/alerts.yaml from it, and
#          charts/tether/files/dashboard.json from deploy/monitoring/dashboard.json.
# promtool is built into the binaries cache first when it is not there (build-promtool.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MONITORING_DIR=$REPO_DIR/deploy/monitoring
ALERTS=$MONITORING_DIR/alerts.yaml
CHART_COPY=$REPO_DIR/charts/tether/files/alerts.yaml
DASHBOARD=$MONITORING_DIR/dashboard.json
CHART_DASHBOARD=$REPO_DIR/charts/tether/files/dashboard.json

# The PrometheusRule's spec, unindented: every line after `spec:` indented by two spaces (or
# blank), up to the first that is not.
extract_spec() {
  awk '
    in_spec && /^(  |$)/ { sub(/^  /, ""); print; next }
    in_spec { exit }
    /^spec:[[:space:]]*$/ { in_spec = 1 }
  ' "$ALERTS"
}

# What charts/tether/files/alerts.yaml must hold: a note, then the spec.
chart_copy() {
  echo "# The groups of deploy/monitoring/alerts.yaml's spec, for the chart's PrometheusRule."
  echo "# Written by \`make monitoring-sync\`; \`make monitoring-check\` fails when it drifts."
  extract_spec
}

case "${1:-}" in
  sync)
    mkdir -p "$(dirname "$CHART_COPY")"
    chart_copy >"$CHART_COPY"
    cp "$DASHBOARD" "$CHART_DASHBOARD"
    log "wrote ${CHART_COPY#"$REPO_DIR"/} and ${CHART_DASHBOARD#"$REPO_DIR"/}"
    ;;
  check)
    "$E2E_DIR/scripts/build-promtool.sh"
    work=$(mktemp -d "${TMPDIR:-/tmp}/tether-monitoring.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    extract_spec >"$work/alerts.rules.yaml"
    grep -q '^groups:' "$work/alerts.rules.yaml" || die "no spec.groups found in ${ALERTS#"$REPO_DIR"/}"
    if ! diff -u "$CHART_COPY" <(chart_copy) >"$work/chart.diff"; then
      cat "$work/chart.diff" >&2
      die "charts/tether/files/alerts.yaml is not deploy/monitoring/alerts.yaml's spec; run make monitoring-sync"
    fi
    cmp -s "$DASHBOARD" "$CHART_DASHBOARD" \
      || die "charts/tether/files/dashboard.json is not deploy/monitoring/dashboard.json; run make monitoring-sync"
    "$BIN_DIR/promtool" check rules "$work/alerts.rules.yaml"
    # Every alert has a test where it fires and one where it does not.
    missing=$(awk '
      FNR == NR && /^ *- alert: / { alerts[$3] = 1; next }
      FNR != NR && /^ *alertname: / { name = $2; next }
      FNR != NR && name != "" && /^ *exp_alerts:/ {
        if ($0 ~ /\[\]/) quiet[name] = 1; else fires[name] = 1
        name = ""
      }
      END {
        for (a in alerts) {
          if (!(a in fires)) print a " (no test where it fires)"
          if (!(a in quiet)) print a " (no test where it stays quiet)"
        }
      }
    ' "$work/alerts.rules.yaml" "$MONITORING_DIR"/tests/*.yaml)
    [[ -z $missing ]] || die "deploy/monitoring/tests/ lacks cases: $missing"
    # The dashboard's queries parse: each becomes a recording rule that promtool checks, with
    # Grafana's variables given values. Every query is one line of dashboard.json.
    dashboard=$MONITORING_DIR/dashboard.json
    {
      printf 'groups:\n- name: dashboard\n  rules:\n'
      sed -n 's/^ *"expr": "\(.*\)",\{0,1\}$/\1/p' "$dashboard" | sed \
        -e 's/\\"/"/g' -e 's/\\\\/\\/g' \
        -e 's/\$__rate_interval/5m/g' -e 's/\$cluster/.*/g' -e 's/\$job/.*/g' -e 's/\$profile/.*/g' \
        -e "s/'/''/g" | awk '{ printf "  - record: dashboard:query_%d\n    expr: '\''%s'\''\n", NR, $0 }'
    } >"$work/dashboard.rules.yaml"
    queries=$(grep -c '"expr":' "$dashboard")
    parsed=$(grep -c '^  - record:' "$work/dashboard.rules.yaml")
    [[ $queries == "$parsed" ]] || die "dashboard.json: $queries queries, $parsed read (keep each on one line)"
    "$BIN_DIR/promtool" check rules "$work/dashboard.rules.yaml"
    # The tests name their rules file `alerts.rules.yaml`, beside them.
    cp "$MONITORING_DIR"/tests/*.yaml "$work/"
    tests=()
    for t in "$MONITORING_DIR"/tests/*.yaml; do tests+=("$work/$(basename "$t")"); done
    "$BIN_DIR/promtool" test rules "${tests[@]}"
    ;;
  *)
    die "usage: $0 check|sync"
    ;;
esac
