//! What the bench measures of a process and reads from the manager: resident memory, CPU
//! time, request counts without watches, reconcile durations.

use std::collections::BTreeMap;

use crate::plane::Counts;

/// Two decimals are all a figure needs.
pub fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The manager's resident memory, in KiB: total, anonymous (heap, stacks) and file-backed
/// (binary text, shared libraries).
#[derive(Clone, Copy)]
pub struct Rss {
    pub total: u64,
    pub anon: u64,
    pub file: u64,
}

impl Rss {
    pub fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
                .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
        };
        Self {
            total: field("VmRSS:"),
            anon: field("RssAnon:"),
            file: field("RssFile:"),
        }
    }

    pub fn mib(self) -> f64 {
        self.total as f64 / 1024.0
    }
}

impl std::fmt::Display for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} MiB ({:.1} anonymous, {:.1} file-backed)",
            self.mib(),
            self.anon as f64 / 1024.0,
            self.file as f64 / 1024.0
        )
    }
}

/// CPU seconds process `pid` has used so far, all its threads, user and system
/// (`/proc/PID/stat` counts in USER_HZ ticks, 100 per second on Linux).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| fields[i].parse::<u64>().expect("tick count");
    // utime and stime are fields 14 and 15, so 11 and 12 after the state field at 3.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The requests in `counts` other than watches, by `verb resource[/subresource]`.
pub fn non_watch_requests(counts: &Counts) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ((verb, resource, sub), n) in counts {
        if verb != "watch" {
            let key = if sub.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}/{sub}")
            };
            *out.entry(key).or_default() += n;
        }
    }
    out
}

/// Where the manager's reconciles spent their time: the mean duration per controller, from its
/// own metrics.
pub fn print_reconcile_times(addr: std::net::SocketAddr) {
    use std::io::{Read, Write};
    let mut text = String::new();
    let mut conn = std::net::TcpStream::connect(addr).expect("metrics endpoint");
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n").unwrap();
    conn.read_to_string(&mut text).unwrap();
    let value = |line: &str| {
        line.rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let mut per_controller: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        for (suffix, sum) in [("_sum{", true), ("_count{", false)] {
            if let Some(rest) = line.strip_prefix(&format!("caplv_reconcile_duration_seconds{suffix}")) {
                let controller = rest.split('"').nth(1).unwrap_or("?").to_owned();
                let entry = per_controller.entry(controller).or_default();
                if sum {
                    entry.0 += value(line)
                } else {
                    entry.1 += value(line)
                }
            }
        }
    }
    for (controller, (sum, count)) in per_controller {
        println!(
            "  reconciles of {controller}: {count} since start, mean {:.1} ms",
            1000.0 * sum / count.max(1.0)
        );
    }
}
