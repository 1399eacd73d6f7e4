//! The process metrics every Prometheus client library exports (client_golang's names and
//! meanings, which kube-scheduler's dashboards read): `process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`. Read from `/proc/self` when `/metrics` is
//! scraped, so nothing runs between scrapes; on other systems, and for any file that cannot be
//! read, the metric is left out rather than made up.
//!
//! prometheus-client has no process collector of its own, and the one crate that adds one for
//! it (kubert-prometheus-process) is built against an older prometheus-client whose registry
//! is another type; these few files are read here instead.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second in `/proc` (the kernel's `USER_HZ`): 100 on every architecture
/// Kubernetes runs on (x86-64, arm64, ppc64le, s390x), whatever the kernel's own tick rate.
const USER_HZ: f64 = 100.0;

/// Why a `/proc` file gave no value.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("reading {path}: {source}")]
    Read {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Parse {
        path: &'static str,
        what: &'static str,
    },
}

/// The fields of `/proc/self/stat` used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// User and system CPU time, in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// When the process started, in clock ticks after boot.
    pub starttime: u64,
    /// Virtual memory size, in bytes.
    pub vsize: u64,
}

impl Stat {
    /// CPU time, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        self.utime.saturating_add(self.stime) as f64 / USER_HZ
    }
}

const STAT: &str = "/proc/self/stat";
const STATUS: &str = "/proc/self/status";
const LIMITS: &str = "/proc/self/limits";
const SYSTEM_STAT: &str = "/proc/stat";
const FDS: &str = "/proc/self/fd";

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may hold
/// spaces and parentheses itself, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Result<Stat, ProcError> {
    let bad = |what| ProcError::Parse { path: STAT, what };
    let (_, rest) = text
        .rsplit_once(')')
        .ok_or_else(|| bad("no command name"))?;
    // After the name: field 3 (state) is the first; field n is at n - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize, what: &'static str| -> Result<u64, ProcError> {
        fields
            .get(n - 3)
            .ok_or_else(|| bad(what))?
            .parse()
            .map_err(|_| bad(what))
    };
    Ok(Stat {
        utime: field(14, "utime")?,
        stime: field(15, "stime")?,
        starttime: field(22, "starttime")?,
        vsize: field(23, "vsize")?,
    })
}

/// The resident set size from `/proc/<pid>/status` (`VmRSS:  1234 kB`), in bytes.
pub fn parse_resident_bytes(status: &str) -> Result<u64, ProcError> {
    let bad = |what| ProcError::Parse { path: STATUS, what };
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .ok_or_else(|| bad("no VmRSS"))?;
    let mut words = line.split_whitespace();
    let kib: u64 = words
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| bad("VmRSS is not a number"))?;
    if words.next() != Some("kB") {
        return Err(bad("VmRSS is not in kB"));
    }
    kib.checked_mul(1024).ok_or_else(|| bad("VmRSS overflows"))
}

/// The soft limit of open files from `/proc/<pid>/limits`; `None` when it is `unlimited`.
pub fn parse_max_fds(limits: &str) -> Result<Option<u64>, ProcError> {
    let bad = |what| ProcError::Parse { path: LIMITS, what };
    let soft = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| bad("no Max open files"))?;
    if soft == "unlimited" {
        return Ok(None);
    }
    soft.parse()
        .map(Some)
        .map_err(|_| bad("Max open files is not a number"))
}

/// The boot time from `/proc/stat` (`btime`), in seconds since the epoch.
pub fn parse_boot_time(stat: &str) -> Result<u64, ProcError> {
    let bad = |what| ProcError::Parse {
        path: SYSTEM_STAT,
        what,
    };
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .ok_or_else(|| bad("no btime"))?
        .trim()
        .parse()
        .map_err(|_| bad("btime is not a number"))
}

fn read(path: &'static str) -> Result<String, ProcError> {
    std::fs::read_to_string(path).map_err(|source| ProcError::Read { path, source })
}

fn open_fds() -> Result<u64, ProcError> {
    let entries = std::fs::read_dir(FDS).map_err(|source| ProcError::Read { path: FDS, source })?;
    Ok(entries.count() as u64)
}

/// Writes each metric whose file could be read; a file that cannot is logged (at debug: a
/// scrape every few seconds must not fill the log) and its metric left out.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl ProcessCollector {
    fn gauge<N>(
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: Result<N, ProcError>,
    ) -> fmt::Result
    where
        ConstGauge<N>: EncodeMetric,
    {
        match value {
            Ok(value) => {
                let gauge = ConstGauge::new(value);
                let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
                gauge.encode(metric)
            }
            Err(e) => {
                tracing::debug!(metric = name, error = %e, "a process metric is left out");
                Ok(())
            }
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        if !cfg!(target_os = "linux") {
            return Ok(());
        }
        let stat = read(STAT).and_then(|text| parse_stat(&text));
        match &stat {
            Ok(stat) => {
                let cpu = ConstCounter::new(stat.cpu_seconds());
                let metric = encoder.encode_descriptor(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent in seconds.",
                    None,
                    cpu.metric_type(),
                )?;
                cpu.encode(metric)?;
            }
            Err(e) => {
                tracing::debug!(error = %e, "the process's CPU and start time are left out");
            }
        }
        Self::gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            read(STATUS).and_then(|text| parse_resident_bytes(&text)),
        )?;
        if let Ok(stat) = &stat {
            Self::gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                Ok(stat.vsize),
            )?;
        }
        Self::gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors.",
            open_fds(),
        )?;
        match read(LIMITS).and_then(|text| parse_max_fds(&text)) {
            Ok(Some(max)) => Self::gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                Ok(max),
            )?,
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "process_max_fds is left out"),
        }
        if let Ok(stat) = &stat {
            let started = read(SYSTEM_STAT)
                .and_then(|text| parse_boot_time(&text))
                .map(|boot| boot as f64 + stat.starttime as f64 / USER_HZ);
            Self::gauge(
                &mut encoder,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                started,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line whose command name holds a space and parentheses: the fields are counted
    /// from the last `)`.
    const STAT_LINE: &str = "4242 (tether (x) y) S 1 4242 4242 0 -1 4194560 2185 0 0 0 \
        250 125 0 0 20 0 12 0 98765 1073741824 5120 18446744073709551615 1 1 0 0 0 0 0 4096 \
        17 1 0 0 0 0 0";

    #[test]
    fn stat_fields_are_counted_from_the_end_of_the_command_name() {
        let stat = parse_stat(STAT_LINE).expect("parsed");
        assert_eq!(
            stat,
            Stat {
                utime: 250,
                stime: 125,
                starttime: 98765,
                vsize: 1_073_741_824,
            }
        );
        assert_eq!(stat.cpu_seconds(), 3.75);
    }

    #[test]
    fn a_short_or_garbled_stat_is_an_error_not_a_zero() {
        assert!(parse_stat("4242 tether S 1").is_err());
        assert!(parse_stat("4242 (tether) S 1 2 3").is_err());
        let garbled = STAT_LINE.replace(" 250 ", " x ");
        assert!(parse_stat(&garbled).is_err());
    }

    #[test]
    fn status_limits_and_boot_time_are_read_from_their_lines() {
        let status = "Name:\ttether\nVmPeak:\t  999 kB\nVmRSS:\t   2048 kB\nThreads:\t12\n";
        assert_eq!(parse_resident_bytes(status).expect("rss"), 2048 * 1024);
        assert!(parse_resident_bytes("VmRSS:\t12 MB\n").is_err());
        assert!(parse_resident_bytes("Name: x\n").is_err());
        assert!(parse_resident_bytes(&format!("VmRSS: {} kB\n", u64::MAX)).is_err());

        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max cpu time              unlimited            unlimited            seconds\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits).expect("limits"), Some(1024));
        let unlimited = limits.replace("1024   ", "unlimited");
        assert_eq!(parse_max_fds(&unlimited).expect("limits"), None);

        let system = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(parse_boot_time(system).expect("btime"), 1_700_000_000);
        assert!(parse_boot_time("cpu 1\n").is_err());
    }

    /// On Linux, this process's own files: every metric is there, the start time is in the
    /// past and not before 2020, and the open files include at least stdin/out/err's slots.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reports_its_own_metrics() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in:\n{text}"))
        };
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(value("process_resident_memory_bytes") > 0.0);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_open_fds") >= 1.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(
            started > 1_577_836_800.0 && started <= now + 1.0,
            "{started}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
    }
}
