//! The bench's reports: the Markdown tables of BENCHMARKS.md and the raw figures as JSON.

use std::path::PathBuf;

use serde::Serialize;

use super::{Contender, Mode, RunResult};
use crate::repo_dir;

/// What the bench ran on, for the report.
pub(super) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or_else(String::new, |kib| {
            format!(", {:.0} GiB", kib / 1024.0 / 1024.0)
        });
    format!("{cores} cores ({cpu}){memory}")
}

pub(super) fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "–".into(),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.digits$}"))
}

/// The four ratio columns both tables end a run's figures with: pods/s against kube-scheduler's
/// and the raw binder's run, CPU per pod and peak RSS against kube-scheduler's.
fn ratio_cells(r: &RunResult, kube: Option<&RunResult>, raw: Option<&RunResult>) -> String {
    [
        ratio(Some(r.pods_per_second), kube.map(|k| k.pods_per_second)),
        ratio(Some(r.pods_per_second), raw.map(|k| k.pods_per_second)),
        ratio(r.cpu_ms_per_pod, kube.and_then(|k| k.cpu_ms_per_pod)),
        ratio(r.peak_rss_mib, kube.and_then(|k| k.peak_rss_mib)),
    ]
    .join(" | ")
}

fn mode_label(mode: Mode) -> String {
    match mode {
        Mode::Batch => mode.kind().into(),
        Mode::Steady(rate) => format!("{} {rate}/s", mode.kind()),
    }
}

/// The report as Markdown: one table row per run, with the ratios to kube-scheduler's and to
/// the raw binder's run of the same workload and mode.
pub fn report(results: &[RunResult], command: &str, versions: &str) -> String {
    let find = |r: &RunResult, who: Contender| {
        results
            .iter()
            .find(|o| o.contender == who && o.workload == r.workload && o.mode == r.mode)
    };
    let mut out = String::new();
    out.push_str(&format!(
        "Run `{command}` on {}; {versions}.\n\n",
        machine()
    ));
    out.push_str("| workload | mode | scheduler | pods/s | pods/s p50 | latency p50 / p99 (ms) | CPU s | CPU ms/pod | peak RSS MiB | pods/s vs kube-scheduler | vs raw binder | CPU/pod vs kube-scheduler | RSS vs kube-scheduler | history written (s after last bind) | Scheduled events (s after last bind) | CPU ms/pod elsewhere: control plane / bench |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in results {
        let kube = find(r, Contender::KubeScheduler);
        let raw = find(r, Contender::RawBinder);
        let latency = match r.mode {
            Mode::Steady(_) => format!("{:.0} / {:.0}", r.latency_p50_ms, r.latency_p99_ms),
            Mode::Batch => "–".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.workload.label(),
            mode_label(r.mode),
            r.contender.label(),
            r.pods_per_second,
            r.pods_per_second_p50,
            latency,
            opt(r.cpu_seconds, 1),
            opt(r.cpu_ms_per_pod, 2),
            opt(r.peak_rss_mib, 0),
            ratio_cells(r, kube, raw),
            opt(r.history_lag_seconds, 1),
            match r.scheduled_events {
                Some(n) => format!("{n} ({})", opt(r.events_lag_seconds, 1)),
                None => "–".into(),
            },
            elsewhere(r),
        ));
    }
    out
}

/// The control plane's and the bench's CPU per pod over the run: what the scheduler leaves of
/// the machine's cores goes there.
fn elsewhere(r: &RunResult) -> String {
    format!(
        "{} / {}",
        opt(r.plane_cpu_ms_per_pod, 2),
        opt(r.bench_cpu_ms_per_pod, 2)
    )
}

/// Writes `results` as JSON to `target/bench/<name>.json`; returns the path.
pub fn write_json<T: Serialize>(results: &[T], name: &str) -> anyhow::Result<PathBuf> {
    let dir = repo_dir().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(results)?)?;
    Ok(path)
}

/// Puts `table` into BENCHMARKS.md between `<!-- {name} table -->` and
/// `<!-- end {name} table -->`, replacing what stood there; when the markers are missing they
/// are added at the end, under `heading` when one is given.
pub fn into_benchmarks(name: &str, heading: Option<&str>, table: &str) -> anyhow::Result<()> {
    let doc = repo_dir().join("BENCHMARKS.md");
    let text = std::fs::read_to_string(&doc).unwrap_or_default();
    let (open, close) = (
        format!("<!-- {name} table -->"),
        format!("<!-- end {name} table -->"),
    );
    let updated = match text.split_once(&open) {
        Some((before, after)) => {
            let rest = after.split_once(&close).map_or("", |(_, r)| r);
            format!("{before}{open}\n{table}{close}{rest}")
        }
        None => match heading {
            Some(heading) => format!("{text}\n## {heading}\n\n{open}\n{table}{close}\n"),
            None => format!("{text}\n{open}\n{table}{close}\n"),
        },
    };
    std::fs::write(&doc, updated)?;
    Ok(())
}

/// The node-count sweep as Markdown: one row per node count and scheduler, with the ratios to
/// kube-scheduler's and the raw binder's run on the same nodes.
pub fn sweep_report(results: &[RunResult], command: &str, versions: &str) -> String {
    let find = |r: &RunResult, who: Contender| {
        results
            .iter()
            .find(|o| o.contender == who && o.nodes == r.nodes)
    };
    let mut out = format!(
        "Run `{command}` on {}; {versions}. Plot: `docs/bench/sweep.png`.\n\n",
        machine()
    );
    out.push_str("| nodes | scheduler | pods/s | CPU ms/pod | peak RSS MiB | pods/s vs kube-scheduler | vs raw binder | CPU/pod vs kube-scheduler | RSS vs kube-scheduler | CPU ms/pod elsewhere: control plane / bench |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for r in results {
        let kube = find(r, Contender::KubeScheduler);
        let raw = find(r, Contender::RawBinder);
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} |\n",
            r.nodes,
            r.contender.label(),
            r.pods_per_second,
            opt(r.cpu_ms_per_pod, 2),
            opt(r.peak_rss_mib, 0),
            ratio_cells(r, kube, raw),
            elsewhere(r),
        ));
    }
    out
}
