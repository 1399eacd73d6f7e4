//! deploy/monitoring against a running tether: every metric an alerting rule
//! (deploy/monitoring/alerts.yaml) or a dashboard panel (deploy/monitoring/dashboard.json)
//! reads must be one the shared tether exports on `/metrics`. A renamed metric, or a rule
//! written for a name tether never had, fails here instead of staying silent in production.
//!
//! The names are read out of the PromQL by a small tokenizer of this file's own (not tether's
//! code): an identifier is a metric name unless it is a keyword, an aggregation or a function
//! (followed by `(`), a label list after `by`/`without`/`on`/`ignoring`/`group_left`/
//! `group_right`, or inside `{…}` (matchers), `[…]` (ranges), a string or a `$variable`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use tether_e2e::{TestNamespace, TestNodes, client, repo_dir, tether_url, wait_bound};

/// The scheduler name of `config/samples/default.yaml`, which `make e2e` serves.
const DEFAULT_SCHEDULER: &str = "tether-scheduler";
/// At most this many rounds of five pods are scheduled to bring out the metrics that need
/// activity: a plugin timing is sampled in 10 % of the cycles, so 200 cycles miss it with a
/// chance of about 1 in 10^9.
const MAX_ROUNDS: usize = 40;

/// PromQL words that are never metric names.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Keywords followed by a list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index after the string that starts at `i` (its quote at `chars[i]`).
fn skip_string(chars: &[char], i: usize) -> usize {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' if quote != '`' => j += 2,
            c if c == quote => return j + 1,
            _ => j += 1,
        }
    }
    j
}

/// The index after the group that opens at `i` (`{`, `[` or `(`), strings inside skipped.
fn skip_group(chars: &[char], i: usize) -> usize {
    let (open, close) = match chars[i] {
        '{' => ('{', '}'),
        '[' => ('[', ']'),
        _ => ('(', ')'),
    };
    let mut depth = 0usize;
    let mut j = i;
    while j < chars.len() {
        match chars[j] {
            '"' | '\'' | '`' => {
                j = skip_string(chars, j);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    j
}

/// The next character that is not white space, from `i`.
fn next_non_space(chars: &[char], i: usize) -> Option<char> {
    chars[i.min(chars.len())..]
        .iter()
        .copied()
        .find(|c| !c.is_whitespace())
}

/// The metric names a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' | '[' => i = skip_group(&chars, i),
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_group(&chars, i);
                } else {
                    while i < chars.len() && ident_char(chars[i]) {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number or a duration (5m, 1e3, 0x1f, 1.5).
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if ident_start(c) => {
                let start = i;
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let lower = word.to_ascii_lowercase();
                let next = next_non_space(&chars, i);
                if LABEL_LISTS.contains(&lower.as_str()) {
                    if next == Some('(') {
                        while chars[i] != '(' {
                            i += 1;
                        }
                        i = skip_group(&chars, i);
                    }
                } else if KEYWORDS.contains(&lower.as_str()) || next == Some('(') {
                    // A keyword, an aggregation or a function.
                } else {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Where each metric is read: metric name → the alerts and panels that read it.
type References = BTreeMap<String, BTreeSet<String>>;

fn add(refs: &mut References, expr: &str, place: &str) {
    for name in metric_names(expr) {
        refs.entry(name).or_default().insert(place.to_string());
    }
}

/// Every `expr` of the PrometheusRule's rules.
fn alert_references(refs: &mut References) -> anyhow::Result<usize> {
    let path = repo_dir().join("deploy/monitoring/alerts.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let rule = tether_e2e::yaml_documents(&text)
        .context("alerts.yaml is YAML")?
        .into_iter()
        .next()
        .unwrap_or_default();
    if rule["kind"].as_str() != Some("PrometheusRule") {
        bail!("deploy/monitoring/alerts.yaml is not a PrometheusRule");
    }
    let mut rules = 0;
    for group in rule["spec"]["groups"].as_array().into_iter().flatten() {
        for r in group["rules"].as_array().into_iter().flatten() {
            let name = r["alert"]
                .as_str()
                .or(r["record"].as_str())
                .ok_or_else(|| anyhow!("a rule without a name: {r:?}"))?;
            let expr = r["expr"]
                .as_str()
                .ok_or_else(|| anyhow!("rule {name} has no expr"))?;
            add(refs, expr, &format!("alert {name}"));
            rules += 1;
        }
    }
    Ok(rules)
}

/// Every panel target's `expr` and every query variable of the dashboard.
fn dashboard_references(refs: &mut References) -> anyhow::Result<usize> {
    fn walk(value: &serde_json::Value, panel: &str, refs: &mut References, exprs: &mut usize) {
        match value {
            serde_json::Value::Object(map) => {
                let panel = map
                    .get("title")
                    .and_then(|t| t.as_str())
                    .map_or(panel.to_string(), |t| format!("panel \"{t}\""));
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("expr", serde_json::Value::String(expr)) => {
                            add(refs, expr, &panel);
                            *exprs += 1;
                        }
                        _ => walk(v, &panel, refs, exprs),
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for v in items {
                    walk(v, panel, refs, exprs);
                }
            }
            _ => {}
        }
    }
    let path = repo_dir().join("deploy/monitoring/dashboard.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let dashboard: serde_json::Value =
        serde_json::from_str(&text).context("dashboard.json is JSON")?;
    let mut exprs = 0;
    walk(&dashboard["panels"], "the dashboard", refs, &mut exprs);
    // Query variables: Grafana's `label_values(<selector>, <label>)`; the selector is PromQL.
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = var["query"]["query"].as_str().or(var["query"].as_str());
        let (Some(query), Some("query")) = (query, var["type"].as_str()) else {
            continue;
        };
        let name = var["name"].as_str().unwrap_or("?");
        let selector = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(','))
            .map(|(selector, _label)| selector)
            .ok_or_else(|| anyhow!("variable {name}: not label_values(<selector>, <label>)"))?;
        add(refs, selector, &format!("variable ${name}"));
        exprs += 1;
    }
    Ok(exprs)
}

/// What `/metrics` shows: each family's type (`# TYPE`) and every sample's name.
struct Exported {
    families: BTreeMap<String, String>,
    samples: BTreeSet<String>,
}

impl Exported {
    fn parse(text: &str) -> Self {
        let mut families = BTreeMap::new();
        let mut samples = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                    families.insert(name.to_string(), kind.to_string());
                }
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                samples.insert(line[..end].to_string());
            }
        }
        Exported { families, samples }
    }

    /// Whether a name a query reads is exported: a sample's name, a family's, or a family's
    /// with the suffix its type gives its samples (`_total` of a counter; `_bucket`, `_sum`,
    /// `_count` of a histogram).
    fn has(&self, name: &str) -> bool {
        if self.samples.contains(name) || self.families.contains_key(name) {
            return true;
        }
        let typed = |suffix: &str, kinds: &[&str]| {
            name.strip_suffix(suffix)
                .and_then(|base| self.families.get(base))
                .is_some_and(|kind| kinds.contains(&kind.as_str()))
        };
        typed("_total", &["counter"])
            || typed("_bucket", &["histogram"])
            || typed("_sum", &["histogram", "summary"])
            || typed("_count", &["histogram", "summary"])
    }
}

/// The shared tether's `/metrics`.
fn scrape() -> anyhow::Result<String> {
    let url = format!("{}/metrics", tether_url());
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5", &url])
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!("tether's /metrics at {url} did not answer; is the tether of `make e2e` running?");
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The names read that `/metrics` lacks, each with where it is read.
fn missing(refs: &References, exported: &Exported) -> Vec<String> {
    refs.iter()
        .filter(|(name, _)| !exported.has(name))
        .map(|(name, places)| {
            let places: Vec<&str> = places.iter().map(String::as_str).collect();
            format!("{name} (read by {})", places.join(", "))
        })
        .collect()
}

/// The oracle itself, on the shapes the alerts and panels use.
#[test]
fn metric_names_are_read_out_of_promql() {
    let names = |expr: &str| metric_names(expr).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, profile) (rate(scheduler_scheduling_attempt_duration_seconds_bucket{job=~"$job",profile=~"$profile",result="scheduled"}[$__rate_interval])))"#
        ),
        ["scheduler_scheduling_attempt_duration_seconds_bucket"]
    );
    assert_eq!(
        names(
            "sum(tether_pending_pods{queue=\"active\"}) > 0\nand on ()\n(sum(rate(tether_schedule_attempts_total[5m])) or vector(0)) == 0"
        ),
        ["tether_pending_pods", "tether_schedule_attempts_total"]
    );
    assert_eq!(
        names(
            r#"sum(leader_election_master_status{name="tether"}) < 1 or absent(leader_election_master_status{name="tether"})"#
        ),
        ["leader_election_master_status"]
    );
    assert_eq!(
        names(
            r#"a_total / ignoring(code) group_left b offset 5m * on(instance) group_left(version) c{x="}{"} unless bool d"#
        ),
        ["a_total", "b", "c", "d"]
    );
    assert_eq!(
        names("sum without (instance) (rate(x[1h30m] @ 1609746000)) by (le)"),
        ["x"]
    );
    assert_eq!(names("tether_watch_current == 0"), ["tether_watch_current"]);
    assert_eq!(
        names("max(x:recorded:rate5m) # comment y"),
        ["x:recorded:rate5m"]
    );
    assert!(names(r#"label_replace(vector(1), "dst", "$1", "src", "(.*)")"#).is_empty());

    let exported = Exported::parse(
        "# TYPE tether_binds counter\ntether_binds_total{profile=\"p\"} 0\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_sum 0\nh_count 0\n# TYPE g gauge\ng 1\n# EOF\n",
    );
    for name in [
        "tether_binds_total",
        "tether_binds",
        "h_bucket",
        "h_sum",
        "h_count",
        "g",
    ] {
        assert!(exported.has(name), "{name}");
    }
    for name in [
        "tether_binds_bucket",
        "g_total",
        "h_total",
        "tether_bind",
        "x",
    ] {
        assert!(!exported.has(name), "{name}");
    }
}

/// Every metric deploy/monitoring reads is one the running tether exports. Some are exported
/// only once something happened (a bind, a pod that fits nowhere, a plugin timed in the 10 % of
/// cycles sampled): the test schedules pods on a node of its own, five at a time, until every
/// name is there, or for [`MAX_ROUNDS`] rounds and three minutes at most.
#[tokio::test]
async fn every_metric_the_alerts_and_the_dashboard_read_is_exported() -> anyhow::Result<()> {
    let mut refs = References::new();
    let rules = alert_references(&mut refs)?;
    let exprs = dashboard_references(&mut refs)?;
    assert!(rules >= 10, "{rules} alerting rules read");
    assert!(exprs >= 30, "{exprs} dashboard queries read");
    assert!(refs.len() >= 30, "names read: {:?}", refs.keys());

    let client = client().await?;
    let ns = TestNamespace::create(&client, "monitoring").await?;
    let nodes = TestNodes::create(&client, "monitoring", 1, "4", |_, _| {}).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    nodes
        .create_pod(&pods, DEFAULT_SCHEDULER, "fits-nowhere", "64")
        .await?;

    let deadline = Instant::now() + Duration::from_secs(180);
    let mut round = 0;
    let lacking = loop {
        let lacking = missing(&refs, &Exported::parse(&scrape()?));
        if lacking.is_empty() || round == MAX_ROUNDS || Instant::now() >= deadline {
            if lacking.is_empty() {
                break lacking;
            }
            // The pod that fits nowhere is tried again at each round's binds and deletions
            // (an idle queue pops it from backoff at once, as upstream's): with the rounds over,
            // it parks, and the gauge of parked pods shows it.
            let settled = Instant::now() + Duration::from_secs(30);
            break loop {
                let lacking = missing(&refs, &Exported::parse(&scrape()?));
                if lacking.is_empty() || Instant::now() >= settled {
                    break lacking;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
        }
        round += 1;
        let names: Vec<String> = (0..5).map(|i| format!("p{round}-{i}")).collect();
        for name in &names {
            nodes
                .create_pod(&pods, DEFAULT_SCHEDULER, name, "100m")
                .await?;
        }
        for name in &names {
            wait_bound(&client, &ns.name, name, Duration::from_secs(30)).await?;
        }
        for name in &names {
            pods.delete(name, &DeleteParams::default().grace_period(0))
                .await
                .with_context(|| format!("deleting pod {name}"))?;
        }
    };
    eprintln!(
        "{} names read; /metrics had them all after {round} rounds of pods",
        refs.len()
    );
    assert!(
        lacking.is_empty(),
        "deploy/monitoring reads metrics tether does not export (after {round} rounds of pods):\n  {}",
        lacking.join("\n  ")
    );
    nodes.delete().await?;
    ns.delete().await
}

/// tether schedules as the kube-scheduler of the API server's own release (or of
/// `$TETHER_KUBERNETES_RELEASE`, when `make test-matrix` pins it): `/metrics` says which, beside
/// what the API server's `/version` says, read here through kube's client.
#[tokio::test]
async fn the_release_tether_schedules_as_is_the_api_servers() -> anyhow::Result<()> {
    let info = client().await?.apiserver_version().await?;
    let want = match std::env::var("TETHER_KUBERNETES_RELEASE") {
        // `v1.38` or `1.38.0` pins 1.38 as `1.38` does.
        Ok(pinned) => {
            let minor = pinned.trim_start_matches('v').split('.').take(2);
            minor.collect::<Vec<_>>().join(".")
        }
        Err(_) => format!("{}.{}", info.major, info.minor.trim_end_matches('+')),
    };
    let line = format!(
        "tether_kubernetes_release_info{{release=\"{want}\",apiserver=\"{}\"}} 1",
        info.git_version
    );
    let text = scrape()?;
    assert!(
        text.lines().any(|l| l == line),
        "/metrics lacks {line:?}; it has: {:?}",
        text.lines()
            .filter(|l| l.starts_with("tether_kubernetes_release_info"))
            .collect::<Vec<_>>()
    );
    Ok(())
}
