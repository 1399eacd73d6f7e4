//! Where this machine's CPU goes during a run, from /proc: the scheduler's own (its process),
//! the control plane's (kube-apiserver, etcd, kube-controller-manager and kwok together) and
//! the bench's (its watches of the pods and events, and the raw binder's binds). On two cores
//! the three share, their sum per pod bounds the throughput: pods/s × CPU seconds per pod can
//! not pass the cores.

use std::process::Command;

use anyhow::{Context, bail};

/// The control plane's processes, by the file name they were started from.
const PLANE: [&str; 4] = ["kube-apiserver", "etcd", "kube-controller-manager", "kwok"];

/// User and system CPU seconds process `pid` has used so far.
pub(super) fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The fields after the command name (which may hold spaces) in parentheses.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("reading /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields.get(i).context("a short stat")?.parse::<f64>()?)
    };
    // utime and stime are the 14th and 15th fields; `rest` starts at the 3rd.
    Ok((ticks(11)? + ticks(12)?) / clock_ticks()?)
}

fn clock_ticks() -> anyhow::Result<f64> {
    let out = Command::new("getconf").arg("CLK_TCK").output()?;
    let ticks: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    if ticks <= 0.0 {
        bail!("CLK_TCK is {ticks}");
    }
    Ok(ticks)
}

/// The control plane's processes running now.
fn plane_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let argv0 = cmdline.split(|b| *b == 0).next()?;
        let name = std::str::from_utf8(argv0).ok()?.rsplit('/').next()?;
        PLANE.contains(&name).then_some(pid)
    })
    .collect()
}

/// The control plane's and the bench's CPU seconds at the start of a window.
pub(super) struct CpuWindow {
    plane: Vec<(u32, f64)>,
    bench: f64,
}

impl CpuWindow {
    pub(super) fn start() -> anyhow::Result<Self> {
        let plane = plane_pids()
            .into_iter()
            .filter_map(|pid| Some((pid, cpu_seconds(pid).ok()?)))
            .collect();
        Ok(CpuWindow {
            plane,
            bench: cpu_seconds(std::process::id())?,
        })
    }

    /// CPU seconds since the start: the control plane's (the processes seen at the start; one
    /// that went away meanwhile counts nothing) and the bench's.
    pub(super) fn since(&self) -> anyhow::Result<(f64, f64)> {
        let plane = self
            .plane
            .iter()
            .filter_map(|(pid, then)| Some((cpu_seconds(*pid).ok()? - then).max(0.0)))
            .sum();
        let bench = cpu_seconds(std::process::id())? - self.bench;
        Ok((plane, bench))
    }
}
