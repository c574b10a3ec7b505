//! Converts Alibaba cluster-trace-v2018 tables (machines, long-running containers and batch
//! instances, with their measured usage) into the simulator's own cluster and trace, so real
//! production workloads can be replayed; the mapping and its assumptions are in
//! `docs/simulator.md` ("Real traces").
//!
//! The real files are headerless, comma-separated and large (the full trace is 280 GB
//! extracted), so every table is read line by line and only the rows of the chosen machines
//! and time window are kept. Rows the converter cannot use (wrong field count, unparsable
//! numbers, batch instances that never ran, rows of other machines) are skipped and counted
//! per table and reason in the [`ConvertReport`] with the first such line; a table of which
//! more than half the data lines are malformed is refused as not being that table.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

use loadstar_sim::cluster::{Cluster, ClusterError, NodeSpec};
use loadstar_sim::trace::{Pattern, PodSpec, REFERENCE_GHZ, Trace, TraceError, Usage, UsageModel};

/// Errors converting a trace.
#[derive(Debug, Error)]
pub enum AlibabaError {
    /// A table could not be opened or read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A required table is absent.
    #[error(
        "{dir}: no {file} (the converter needs machine_meta.csv and at least one of container_meta.csv or batch_instance.csv + batch_task.csv)"
    )]
    Missing {
        /// The directory.
        dir: String,
        /// The missing file.
        file: &'static str,
    },
    /// Most lines of a table do not have its shape: probably another table or format.
    #[error(
        "{table}: {bad} of {lines} data lines are malformed (first at line {first_line}: {reason}); is this the {table} table of cluster-trace-v2018?"
    )]
    NotThisTable {
        /// The table.
        table: &'static str,
        /// Malformed lines.
        bad: u64,
        /// Data lines.
        lines: u64,
        /// First malformed line (1-based).
        first_line: u64,
        /// Why it is malformed.
        reason: String,
    },
    /// The options are invalid.
    #[error("option {option}: {message}")]
    Option {
        /// The option.
        option: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Nothing is left to simulate after filtering.
    #[error("nothing to simulate: {0}")]
    Empty(String),
    /// The converted cluster is invalid.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The converted trace is invalid.
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// How the converter maps the trace's normalised figures to absolute ones, and what it keeps.
/// The defaults are assumptions (the trace does not say), documented in `docs/simulator.md`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlibabaOptions {
    /// Keep the first N machines by id (sorted as strings), and only the containers and
    /// instances that ran on them; `None` keeps all.
    pub machines: Option<usize>,
    /// Start of the replayed window, in trace seconds (arrivals are shifted by it).
    pub start_s: f64,
    /// Length of the window, seconds; `None` runs to the last event kept.
    pub window_s: Option<f64>,
    /// Memory of a machine whose normalised `mem_size` is 100, GiB (default 512).
    pub machine_memory_gib: f64,
    /// Every machine's NIC speed, Gbit/s (default 10); normalised `net_in`/`net_out` of 100
    /// is taken as this speed.
    pub nic_gbps: f64,
    /// Every machine's disk throughput, MB/s (default 1000); `disk_io_percent` is a share of
    /// it.
    pub disk_mb_per_second: f64,
    /// Period of the burst pattern batch instances get from their `cpu_avg`/`cpu_max`,
    /// seconds (default 60).
    pub batch_burst_period_s: f64,
}

impl Default for AlibabaOptions {
    fn default() -> Self {
        AlibabaOptions {
            machines: None,
            start_s: 0.0,
            window_s: None,
            machine_memory_gib: 512.0,
            nic_gbps: 10.0,
            disk_mb_per_second: 1000.0,
            batch_burst_period_s: 60.0,
        }
    }
}

impl AlibabaOptions {
    fn validate(&self) -> Result<(), AlibabaError> {
        let positive = |option: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(AlibabaError::Option {
                    option,
                    message: format!("must be a positive number, got {v}"),
                })
            }
        };
        positive("machine-memory-gib", self.machine_memory_gib)?;
        positive("nic-gbps", self.nic_gbps)?;
        positive("disk-mb-per-second", self.disk_mb_per_second)?;
        positive("batch-burst-period-s", self.batch_burst_period_s)?;
        if !(self.start_s.is_finite() && self.start_s >= 0.0) {
            return Err(AlibabaError::Option {
                option: "start-s",
                message: format!("must be ≥ 0, got {}", self.start_s),
            });
        }
        if let Some(w) = self.window_s {
            positive("window-s", w)?;
        }
        if self.machines == Some(0) {
            return Err(AlibabaError::Option {
                option: "machines",
                message: "must be ≥ 1".into(),
            });
        }
        Ok(())
    }

    /// MiB of a memory figure the trace normalises to the largest machine (100).
    fn mem_mib(&self, normalised: f64) -> f64 {
        normalised / 100.0 * self.machine_memory_gib * 1024.0
    }

    fn window_end(&self) -> f64 {
        self.window_s.map_or(f64::INFINITY, |w| self.start_s + w)
    }
}

/// The six table names of cluster-trace-v2018 (`machine_usage.csv` is not read: the
/// simulator derives node load from the pods it places).
pub const TABLES: &[&str] = &[
    "machine_meta.csv",
    "container_meta.csv",
    "container_usage.csv",
    "batch_task.csv",
    "batch_instance.csv",
];

/// The tables to convert, as line readers (files, or text in tests).
pub struct Tables<R> {
    /// `machine_meta.csv`.
    pub machine_meta: R,
    /// `container_meta.csv`, if any.
    pub container_meta: Option<R>,
    /// `container_usage.csv`, if any.
    pub container_usage: Option<R>,
    /// `batch_task.csv`, if any (needed with `batch_instance`).
    pub batch_task: Option<R>,
    /// `batch_instance.csv`, if any.
    pub batch_instance: Option<R>,
}

/// Per table: lines read, rows kept, and rows skipped by reason (count and first line).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableReport {
    /// Data lines read (blank lines excluded).
    pub lines: u64,
    /// Rows used.
    pub kept: u64,
    /// Skipped rows: reason → (count, first 1-based line).
    pub skipped: BTreeMap<String, (u64, u64)>,
    malformed: u64,
}

impl TableReport {
    fn skip(&mut self, reason: impl Into<String>, line: u64) {
        self.skip_rows(reason, line, 1);
    }

    /// `rows` rows counted kept so far are skipped after all (their first at `line`).
    fn unkeep(&mut self, reason: impl Into<String>, line: u64, rows: u64) {
        self.kept -= rows.min(self.kept);
        self.skip_rows(reason, line, rows);
    }

    fn skip_rows(&mut self, reason: impl Into<String>, line: u64, rows: u64) {
        let e = self.skipped.entry(reason.into()).or_insert((0, line));
        e.0 += rows;
        e.1 = e.1.min(line);
    }

    fn malformed(&mut self, reason: String, line: u64) {
        self.malformed += 1;
        self.skip(format!("malformed: {reason}"), line);
    }
}

/// What a conversion kept and skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConvertReport {
    /// Per table, by file name.
    pub tables: BTreeMap<&'static str, TableReport>,
    /// Usage fields holding the trace's invalid markers (-1, 101, or outside 0–100) that
    /// were replaced by the container's previous valid value.
    pub invalid_values: u64,
    /// Containers kept without a single usage sample (their usage is taken as 0).
    pub containers_without_usage: u64,
    /// Machines, containers and batch instances in the result.
    pub machines: usize,
    /// Long-running containers converted to pods.
    pub containers: usize,
    /// Batch instances converted to pods.
    pub instances: usize,
    /// Usage samples converted.
    pub usage_samples: usize,
    /// The window replayed, trace seconds.
    pub window: (f64, f64),
}

impl ConvertReport {
    /// A human-readable summary (also written as `convert.txt`).
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "converted: {} machines, {} containers, {} batch instances, {} usage samples; window {}–{} s of the trace",
            self.machines,
            self.containers,
            self.instances,
            self.usage_samples,
            self.window.0,
            self.window.1
        );
        let _ = writeln!(
            s,
            "invalid usage values replaced by the previous valid one: {}; containers without usage samples: {}",
            self.invalid_values, self.containers_without_usage
        );
        for (table, t) in &self.tables {
            let _ = writeln!(s, "{table}: {} lines, {} kept", t.lines, t.kept);
            for (reason, (count, first)) in &t.skipped {
                let _ = writeln!(s, "  skipped {count}: {reason} (first at line {first})");
            }
        }
        s
    }
}

/// A converted trace.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The machines as simulator nodes.
    pub cluster: Cluster,
    /// Containers and batch instances as pods; containers carry their usage series.
    pub trace: Trace,
    /// What was kept and skipped.
    pub report: ConvertReport,
}

/// Opens the tables in `dir` (`machine_meta.csv` and the others that exist) and converts them.
pub fn convert_dir(dir: &Path, options: &AlibabaOptions) -> Result<Converted, AlibabaError> {
    let open =
        |name: &'static str| -> Result<Option<std::io::BufReader<std::fs::File>>, AlibabaError> {
            let path: PathBuf = dir.join(name);
            match std::fs::File::open(&path) {
                Ok(f) => Ok(Some(std::io::BufReader::new(f))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(AlibabaError::Read {
                    path: path.display().to_string(),
                    source,
                }),
            }
        };
    let missing = |file| AlibabaError::Missing {
        dir: dir.display().to_string(),
        file,
    };
    let tables = Tables {
        machine_meta: open("machine_meta.csv")?.ok_or_else(|| missing("machine_meta.csv"))?,
        container_meta: open("container_meta.csv")?,
        container_usage: open("container_usage.csv")?,
        batch_task: open("batch_task.csv")?,
        batch_instance: open("batch_instance.csv")?,
    };
    if tables.batch_instance.is_some() && tables.batch_task.is_none() {
        return Err(missing("batch_task.csv"));
    }
    if tables.container_meta.is_none() && tables.batch_instance.is_none() {
        return Err(missing("container_meta.csv"));
    }
    convert(tables, options, &dir.display().to_string())
}

/// One headerless table read line by line: `each` gets the 1-based line number and the
/// fields of every non-blank line with exactly `columns` fields, and returns why a row is
/// malformed (`Err`) or nothing.
fn read_table<R: BufRead>(
    name: &'static str,
    dir: &str,
    reader: R,
    columns: usize,
    report: &mut ConvertReport,
    mut each: impl FnMut(u64, &[&str], &mut TableReport) -> Result<(), String>,
) -> Result<(), AlibabaError> {
    let mut t = TableReport::default();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| AlibabaError::Read {
            path: format!("{dir}/{name}"),
            source,
        })?;
        let n = i as u64 + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        t.lines += 1;
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != columns {
            t.malformed(format!("{} fields, want {columns}", fields.len()), n);
            continue;
        }
        if let Err(reason) = each(n, &fields, &mut t) {
            t.malformed(reason, n);
        }
    }
    if t.lines > 0 && t.malformed * 2 > t.lines {
        let (reason, (_, first_line)) = t
            .skipped
            .iter()
            .filter(|(r, _)| r.starts_with("malformed"))
            .min_by_key(|(_, (_, first))| *first)
            .map(|(r, v)| (r.clone(), *v))
            .unwrap_or_default();
        return Err(AlibabaError::NotThisTable {
            table: name,
            bad: t.malformed,
            lines: t.lines,
            first_line,
            reason,
        });
    }
    report.tables.insert(name, t);
    Ok(())
}

fn num(fields: &[&str], i: usize, column: &str) -> Result<f64, String> {
    let v = fields[i];
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("{column} {v:?} is not a number"))
}

/// A Kubernetes-style name: lowercase, `[a-z0-9.-]`, other characters as `-`.
fn dns_name(parts: &[&str]) -> String {
    parts
        .join("-")
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

struct Machine {
    cpus: u32,
    mem_size: f64,
    zone: String,
    /// Its rows in the table, and the first one's line.
    rows: (u64, u64),
}

struct Container {
    /// Its rows in `container_meta`, and the first one's line.
    rows: (u64, u64),
    created: f64,
    app: String,
    cpu_request: f64,
    cpu_limit: f64,
    mem_size: f64,
    samples: Vec<(f64, [Option<f64>; 4])>,
}

/// `machine_meta.csv`: the machines kept, by id.
fn read_machines<R: BufRead>(
    reader: R,
    options: &AlibabaOptions,
    dir: &str,
    report: &mut ConvertReport,
) -> Result<BTreeMap<String, Machine>, AlibabaError> {
    // machine_id, time_stamp, failure_domain_1, failure_domain_2, cpu_num, mem_size, status:
    // the last row of a machine wins (machines are not added or removed mid-run).
    let mut machines: BTreeMap<String, Machine> = BTreeMap::new();
    read_table("machine_meta.csv", dir, reader, 7, report, |n, f, t| {
        let cpus = num(f, 4, "cpu_num")?;
        let mem_size = num(f, 5, "mem_size")?;
        let plausible = (1.0..=100_000.0).contains(&cpus) && mem_size > 0.0 && mem_size <= 100.0;
        if !plausible {
            return Err(format!(
                "cpu_num {cpus} or mem_size {mem_size} out of range"
            ));
        }
        let rows = machines.get(f[0]).map_or((0, n), |m| m.rows);
        machines.insert(
            f[0].to_string(),
            Machine {
                cpus: cpus as u32,
                mem_size,
                zone: dns_name(&["fd", f[2]]),
                rows: (rows.0 + 1, rows.1),
            },
        );
        t.kept += 1;
        Ok(())
    })?;
    if let Some(n) = options.machines {
        while machines.len() > n {
            if let (Some((_, m)), Some(t)) = (
                machines.pop_last(),
                report.tables.get_mut("machine_meta.csv"),
            ) {
                t.unkeep("machine not kept (--machines)", m.rows.1, m.rows.0);
            }
        }
    }
    if machines.is_empty() {
        return Err(AlibabaError::Empty(
            "machine_meta.csv has no usable machine".into(),
        ));
    }

    Ok(machines)
}

/// `container_meta.csv` and `container_usage.csv`: the long-running containers of the kept
/// machines, with their usage series.
fn read_containers<R: BufRead>(
    meta: R,
    usage: Option<R>,
    machines: &BTreeMap<String, Machine>,
    options: &AlibabaOptions,
    dir: &str,
    report: &mut ConvertReport,
) -> Result<Vec<PodSpec>, AlibabaError> {
    let (start, end) = (options.start_s, options.window_end());
    let mut pods = Vec::new();
    // container_id, machine_id, time_stamp, app_du, status, cpu_request, cpu_limit, mem_size:
    // a container is created at its earliest row (0: before the trace) and runs to the end.
    let mut containers: HashMap<String, Container> = HashMap::new();
    {
        read_table("container_meta.csv", dir, meta, 8, report, |n, f, t| {
            let ts = num(f, 2, "time_stamp")?;
            let (cpu_request, cpu_limit, mem_size) = (
                num(f, 5, "cpu_request")?,
                num(f, 6, "cpu_limit")?,
                num(f, 7, "mem_size")?,
            );
            if cpu_request < 0.0 || cpu_limit < 0.0 || !(0.0..=100.0).contains(&mem_size) {
                return Err("negative request or mem_size outside 0–100".into());
            }
            if !machines.contains_key(f[1]) {
                t.skip("machine not kept", n);
                return Ok(());
            }
            t.kept += 1;
            let c = containers
                .entry(f[0].to_string())
                .or_insert_with(|| Container {
                    rows: (0, n),
                    created: ts,
                    app: f[3].to_string(),
                    cpu_request,
                    cpu_limit,
                    mem_size,
                    samples: Vec::new(),
                });
            c.created = c.created.min(ts);
            c.rows.0 += 1;
            Ok(())
        })?;
    }
    // container_id, machine_id, time_stamp, cpu_util_percent, mem_util_percent, cpi, mem_gps,
    // mpki, net_in, net_out, disk_io_percent.
    if let Some(r) = usage {
        read_table("container_usage.csv", dir, r, 11, report, |n, f, t| {
            let ts = num(f, 2, "time_stamp")?;
            let mut v = [0.0; 5];
            for (k, (i, column)) in [
                (3, "cpu_util_percent"),
                (4, "mem_util_percent"),
                (8, "net_in"),
                (9, "net_out"),
                (10, "disk_io_percent"),
            ]
            .into_iter()
            .enumerate()
            {
                v[k] = num(f, i, column)?;
            }
            let Some(c) = containers.get_mut(f[0]) else {
                t.skip("container not kept (unknown, or on a machine not kept)", n);
                return Ok(());
            };
            if ts < start || ts >= end {
                t.skip("outside the window", n);
                return Ok(());
            }
            let valid = |x: f64| (0.0..=100.0).contains(&x).then_some(x);
            let net = match (valid(v[2]), valid(v[3])) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
            c.samples
                .push((ts, [valid(v[0]), valid(v[1]), net, valid(v[4])]));
            t.kept += 1;
            Ok(())
        })?;
    }
    // In id order; each container's samples are moved into its series, not copied.
    let mut containers: Vec<(String, Container)> = containers.into_iter().collect();
    containers.sort_by(|a, b| a.0.cmp(&b.0));
    for (id, c) in containers {
        if c.created >= end {
            if let Some(t) = report.tables.get_mut("container_meta.csv") {
                t.unkeep("created after the window", c.rows.1, c.rows.0);
            }
            continue;
        }
        let arrival_trace = c.created.max(start);
        let cpu_m = c.cpu_request * 10.0;
        let basis_m = if cpu_m > 0.0 {
            cpu_m
        } else {
            c.cpu_limit * 10.0
        };
        let memory_mib = options.mem_mib(c.mem_size);
        let mut samples = c.samples;
        samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut last = [0.0; 4];
        let mut series = Vec::with_capacity(samples.len());
        for (ts, v) in samples {
            for (k, x) in v.iter().enumerate() {
                match x {
                    Some(x) => last[k] = *x,
                    None => report.invalid_values += 1,
                }
            }
            series.push((
                (ts - arrival_trace).max(0.0),
                Usage {
                    cpu_m: last[0] / 100.0 * basis_m,
                    memory_mib: last[1] / 100.0 * memory_mib,
                    net_mbps: last[2] / 100.0 * options.nic_gbps * 1000.0,
                    disk_mbps: last[3] / 100.0 * options.disk_mb_per_second,
                    gpu_util: 0.0,
                },
            ));
        }
        if series.is_empty() {
            report.containers_without_usage += 1;
        }
        let mean = mean_usage(&series);
        report.usage_samples += series.len();
        report.containers += 1;
        pods.push(PodSpec {
            id: dns_name(&[&id]),
            arrival_s: arrival_trace - start,
            duration_s: 0.0,
            class: "container".into(),
            owner: dns_name(&[&c.app]),
            cpu_request_m: cpu_m.round() as i64,
            memory_request_mib: memory_mib.round() as i64,
            cpu_limit_m: (c.cpu_limit * 10.0).round() as i64,
            memory_limit_mib: memory_mib.round() as i64,
            gpus: 0,
            usage: UsageModel {
                series: (!series.is_empty()).then(|| Arc::new(series)),
                ..UsageModel::flat(mean)
            },
        });
    }

    Ok(pods)
}

/// `batch_task.csv` and `batch_instance.csv`: the batch instances that ran on the kept
/// machines within the window.
fn read_batch<R: BufRead>(
    tasks: Option<R>,
    instances: R,
    machines: &BTreeMap<String, Machine>,
    options: &AlibabaOptions,
    dir: &str,
    report: &mut ConvertReport,
) -> Result<Vec<PodSpec>, AlibabaError> {
    let (start, end) = (options.start_s, options.window_end());
    let mut pods = Vec::new();
    // task_name, instance_num, job_name, task_type, status, start_time, end_time, plan_cpu,
    // plan_mem: the instances' requests.
    let mut plans: HashMap<(String, String), (f64, f64)> = HashMap::new();
    if let Some(r) = tasks {
        read_table("batch_task.csv", dir, r, 9, report, |_, f, t| {
            let (cpu, mem) = (num(f, 7, "plan_cpu")?, num(f, 8, "plan_mem")?);
            if cpu < 0.0 || !(0.0..=100.0).contains(&mem) {
                return Err("plan_cpu negative or plan_mem outside 0–100".into());
            }
            plans.insert((f[2].to_string(), f[0].to_string()), (cpu, mem));
            t.kept += 1;
            Ok(())
        })?;
    }
    // instance_name, task_name, job_name, task_type, status, start_time, end_time,
    // machine_id, seq_no, total_seq_no, cpu_avg, cpu_max, mem_avg, mem_max.
    {
        let mut seen = HashSet::new();
        read_table(
            "batch_instance.csv",
            dir,
            instances,
            14,
            report,
            |n, f, t| {
                let (s, e) = (num(f, 5, "start_time")?, num(f, 6, "end_time")?);
                if s <= 0.0 || e <= s {
                    t.skip("never ran (start_time 0 or end_time ≤ start_time)", n);
                    return Ok(());
                }
                if !machines.contains_key(f[7]) {
                    t.skip("machine not kept", n);
                    return Ok(());
                }
                if e <= start || s >= end {
                    t.skip("outside the window", n);
                    return Ok(());
                }
                // The real table leaves the figures empty for some instances that ran.
                if f[10].is_empty() || f[12].is_empty() {
                    t.skip("no usage figures (cpu_avg or mem_avg empty)", n);
                    return Ok(());
                }
                let (cpu_avg, mem_avg) = (num(f, 10, "cpu_avg")?, num(f, 12, "mem_avg")?);
                let cpu_max = if f[11].is_empty() {
                    cpu_avg
                } else {
                    num(f, 11, "cpu_max")?
                };
                if cpu_avg < 0.0 || cpu_max < 0.0 || !(0.0..=100.0).contains(&mem_avg) {
                    return Err("cpu_avg/cpu_max negative or mem_avg outside 0–100".into());
                }
                let Some(&(plan_cpu, plan_mem)) = plans.get(&(f[2].to_string(), f[1].to_string()))
                else {
                    t.skip("no batch_task row for its job and task", n);
                    return Ok(());
                };
                let id = dns_name(&[f[2], f[1], f[0], f[8]]);
                if !seen.insert(id.clone()) {
                    t.skip("duplicate instance (job, task, name, seq_no)", n);
                    return Ok(());
                }
                // A mean-preserving burst whose high phase reaches cpu_max (capped where the low
                // phase would go below zero: amplitude ≤ (1 − duty)/duty = 3 at duty 0.25).
                let amplitude = if cpu_avg > 0.0 {
                    (cpu_max / cpu_avg - 1.0).clamp(0.0, 3.0)
                } else {
                    0.0
                };
                let arrival = s.max(start);
                pods.push(PodSpec {
                    id,
                    arrival_s: arrival - start,
                    duration_s: e.min(end) - arrival,
                    class: "batch".into(),
                    owner: dns_name(&[f[2]]),
                    cpu_request_m: (plan_cpu * 10.0).round() as i64,
                    memory_request_mib: options.mem_mib(plan_mem).round() as i64,
                    cpu_limit_m: 0,
                    memory_limit_mib: 0,
                    gpus: 0,
                    usage: UsageModel {
                        pattern: if amplitude > 0.0 {
                            Pattern::Burst
                        } else {
                            Pattern::Flat
                        },
                        period_s: options.batch_burst_period_s,
                        amplitude,
                        duty: 0.25,
                        ..UsageModel::flat(Usage {
                            cpu_m: cpu_avg * 10.0,
                            memory_mib: options.mem_mib(mem_avg),
                            ..Usage::default()
                        })
                    },
                });
                t.kept += 1;
                Ok(())
            },
        )?;
        report.instances = report.tables["batch_instance.csv"].kept as usize;
    }
    Ok(pods)
}

/// Converts the tables; `dir` names them in errors.
pub fn convert<R: BufRead>(
    tables: Tables<R>,
    options: &AlibabaOptions,
    dir: &str,
) -> Result<Converted, AlibabaError> {
    options.validate()?;
    let mut report = ConvertReport::default();
    let (start, end) = (options.start_s, options.window_end());
    let machines = read_machines(tables.machine_meta, options, dir, &mut report)?;
    let mut pods = Vec::new();
    if let Some(meta) = tables.container_meta {
        pods.extend(read_containers(
            meta,
            tables.container_usage,
            &machines,
            options,
            dir,
            &mut report,
        )?);
    }
    if let Some(instances) = tables.batch_instance {
        pods.extend(read_batch(
            tables.batch_task,
            instances,
            &machines,
            options,
            dir,
            &mut report,
        )?);
    }
    if pods.is_empty() {
        return Err(AlibabaError::Empty(format!(
            "no container or batch instance ran on the {} machines kept within the window {start}–{end} s",
            machines.len()
        )));
    }
    // The last event: a run's end, or a container's last usage sample.
    let last = pods
        .iter()
        .map(|p| {
            let samples = p
                .usage
                .series
                .as_ref()
                .and_then(|s| s.last())
                .map_or(0.0, |s| s.0);
            p.arrival_s + p.duration_s.max(samples)
        })
        .fold(0.0, f64::max);
    report.window = (start, if end.is_finite() { end } else { start + last });
    report.machines = machines.len();
    let nodes = machines
        .iter()
        .map(|(id, m)| NodeSpec {
            name: dns_name(&[id]),
            cpus: m.cpus,
            cpu_ghz: REFERENCE_GHZ,
            memory_gib: m.mem_size / 100.0 * options.machine_memory_gib,
            nic_gbps: options.nic_gbps,
            disk_mb_per_second: options.disk_mb_per_second,
            gpus: 0,
            gpu_memory_gib: 80.0,
            zone: m.zone.clone(),
            class: format!("{}-cores", m.cpus),
        })
        .collect();
    Ok(Converted {
        cluster: Cluster::new(nodes)?,
        trace: Trace::new(pods)?,
        report,
    })
}

/// The mean of a series' samples, for the trace's informational mean columns (the series
/// itself is what the simulator replays).
fn mean_usage(series: &[(f64, Usage)]) -> Usage {
    if series.is_empty() {
        return Usage::default();
    }
    let n = series.len() as f64;
    let sum = |f: fn(&Usage) -> f64| series.iter().map(|(_, u)| f(u)).sum::<f64>() / n;
    Usage {
        cpu_m: sum(|u| u.cpu_m),
        memory_mib: sum(|u| u.memory_mib),
        net_mbps: sum(|u| u.net_mbps),
        disk_mbps: sum(|u| u.disk_mbps),
        gpu_util: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables<'a>(
        machines: &'a str,
        containers: &'a str,
        usage: &'a str,
        tasks: &'a str,
        instances: &'a str,
    ) -> Tables<&'a [u8]> {
        Tables {
            machine_meta: machines.as_bytes(),
            container_meta: Some(containers.as_bytes()),
            container_usage: Some(usage.as_bytes()),
            batch_task: Some(tasks.as_bytes()),
            batch_instance: Some(instances.as_bytes()),
        }
    }

    const MACHINES: &str = "m_1,0,1,a,32,50,USING\nm_2,0,2,b,64,100,USING\n";

    #[test]
    fn maps_units_and_normalised_values() {
        let t = tables(
            MACHINES,
            "c_1,m_1,0,app_a,started,400,800,10\n",
            "c_1,m_1,1000,50,80,1,1,1,20,40,30\nc_1,m_1,1060,-1,80,1,1,1,101,40,101\n",
            "M1,2,j_1,1,Terminated,1000,2000,250,1\n",
            "ins_1,M1,j_1,1,Terminated,1100,1700,m_2,1,1,300,600,2,3\n",
        );
        let o = AlibabaOptions {
            start_s: 900.0,
            ..AlibabaOptions::default()
        };
        let c = convert(t, &o, "test").expect("converts");
        let nodes = &c.cluster.nodes;
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].name, "m-1");
        assert_eq!(nodes[0].cpus, 32);
        assert_eq!(nodes[0].memory_gib, 256.0);
        assert_eq!(nodes[1].memory_gib, 512.0);
        assert_eq!(nodes[0].zone, "fd-1");

        let pods = &c.trace.pods;
        assert_eq!(pods.len(), 2);
        let ctr = pods
            .iter()
            .find(|p| p.class == "container")
            .expect("a container");
        // Created before the window: arrives at its start.
        assert_eq!(ctr.arrival_s, 0.0);
        assert_eq!(ctr.duration_s, 0.0);
        assert_eq!(ctr.owner, "app-a");
        assert_eq!(ctr.cpu_request_m, 4000);
        assert_eq!(ctr.cpu_limit_m, 8000);
        // 10 % of a 512 GiB machine.
        assert_eq!(ctr.memory_request_mib, 52429);
        let s = ctr.usage.series.as_ref().expect("series");
        assert_eq!(s.len(), 2);
        // Offsets from the pod's arrival in trace time (900 s).
        assert_eq!(s[0].0, 100.0);
        assert_eq!(s[0].1.cpu_m, 2000.0); // 50 % of the 4-core request
        assert!((s[0].1.memory_mib - 0.8 * 52428.8).abs() < 1e-6);
        assert_eq!(s[0].1.net_mbps, 4000.0); // max(in, out) = 40 % of 10 Gbit/s
        assert_eq!(s[0].1.disk_mbps, 300.0);
        // Invalid -1/101 hold the previous valid value; the net pair is invalid as a whole.
        assert_eq!(s[1].1.cpu_m, 2000.0);
        assert_eq!(s[1].1.net_mbps, 4000.0);
        assert_eq!(s[1].1.disk_mbps, 300.0);
        assert_eq!(c.report.invalid_values, 3);

        let b = pods
            .iter()
            .find(|p| p.class == "batch")
            .expect("an instance");
        assert_eq!(b.id, "j-1-m1-ins-1-1");
        assert_eq!(b.arrival_s, 200.0);
        assert_eq!(b.duration_s, 600.0);
        assert_eq!(b.cpu_request_m, 2500);
        assert_eq!(b.memory_request_mib, 5243); // 1 % of 512 GiB
        assert_eq!(b.usage.mean.cpu_m, 3000.0);
        assert_eq!(b.usage.pattern, Pattern::Burst);
        assert_eq!(b.usage.amplitude, 1.0); // peaks at cpu_max = 2 × cpu_avg
        // The burst keeps the mean: average over one period equals cpu_avg.
        let mean: f64 = (0..600)
            .map(|i| b.usage.at(f64::from(i) * 0.1, 1).cpu_m)
            .sum::<f64>()
            / 600.0;
        assert!((mean - 3000.0).abs() < 1.0, "{mean}");
    }

    #[test]
    fn window_and_machine_subset_filter_and_are_reported() {
        let t = tables(
            MACHINES,
            "c_1,m_1,0,a,started,100,100,1\nc_2,m_2,0,b,started,100,100,1\nc_3,m_1,5000,a,started,100,100,1\n",
            "c_1,m_1,100,10,10,1,1,1,1,1,1\nc_2,m_2,100,10,10,1,1,1,1,1,1\nc_1,m_1,4000,10,10,1,1,1,1,1,1\n",
            "M1,2,j_1,1,Terminated,0,0,100,1\n",
            "i_1,M1,j_1,1,Terminated,50,500,m_1,1,1,100,100,1,1\n\
             i_2,M1,j_1,1,Waiting,0,0,,1,1,,,,\n\
             i_3,M1,j_1,1,Terminated,50,500,m_2,1,1,100,100,1,1\n\
             i_4,M1,j_9,1,Terminated,50,500,m_1,1,1,100,100,1,1\n\
             i_5,M1,j_1,1,Terminated,3000,4000,m_1,1,1,100,100,1,1\n",
        );
        let o = AlibabaOptions {
            machines: Some(1),
            start_s: 0.0,
            window_s: Some(1000.0),
            ..AlibabaOptions::default()
        };
        let c = convert(t, &o, "test").expect("converts");
        assert_eq!(c.cluster.nodes.len(), 1);
        let ids: Vec<&str> = c.trace.pods.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["c-1", "j-1-m1-i-1-1"]);
        let bi = &c.report.tables["batch_instance.csv"];
        assert_eq!(bi.kept, 1);
        let reasons: Vec<(&str, u64)> = bi
            .skipped
            .iter()
            .map(|(r, (n, _))| (r.as_str(), *n))
            .collect();
        assert_eq!(
            reasons,
            [
                ("machine not kept", 1),
                ("never ran (start_time 0 or end_time ≤ start_time)", 1),
                ("no batch_task row for its job and task", 1),
                ("outside the window", 1),
            ]
        );
        // c_3 (created after the window) and m_2's row are reported, not just missing.
        let cm = &c.report.tables["container_meta.csv"];
        assert_eq!(cm.skipped["created after the window"], (1, 3));
        assert_eq!(cm.kept + cm.skipped.values().map(|v| v.0).sum::<u64>(), 3);
        let mm = &c.report.tables["machine_meta.csv"];
        assert_eq!(mm.kept, 1);
        assert_eq!(mm.skipped["machine not kept (--machines)"], (1, 2));
        let cu = &c.report.tables["container_usage.csv"];
        assert_eq!(cu.kept, 1);
        assert_eq!(cu.skipped["outside the window"], (1, 3));
        assert!(c.report.render().contains("skipped 1: machine not kept"));
    }

    #[test]
    fn the_window_runs_to_the_last_sample_and_empty_figures_are_skipped() {
        // Containers only, no --window-s: the window ends at the last usage sample.
        let t = Tables {
            machine_meta: MACHINES.as_bytes(),
            container_meta: Some("c_1,m_1,0,a,started,100,100,1\n".as_bytes()),
            container_usage: Some(
                "c_1,m_1,100,10,10,1,1,1,1,1,1\nc_1,m_1,7300,10,10,1,1,1,1,1,1\n".as_bytes(),
            ),
            batch_task: None,
            batch_instance: None,
        };
        let c = convert(t, &AlibabaOptions::default(), "test").expect("converts");
        assert_eq!(c.report.window, (0.0, 7300.0));
        // A batch instance that ran but has no usage figures is skipped by name.
        let t = tables(
            MACHINES,
            "",
            "",
            "M1,2,j_1,1,Terminated,10,500,100,1\n",
            "i_1,M1,j_1,1,Terminated,50,500,m_1,1,1,,,,\ni_2,M1,j_1,1,Terminated,50,500,m_1,1,1,100,,1,\n",
        );
        let c = convert(t, &AlibabaOptions::default(), "test").expect("converts");
        let bi = &c.report.tables["batch_instance.csv"];
        assert_eq!(
            bi.skipped["no usage figures (cpu_avg or mem_avg empty)"],
            (1, 1)
        );
        assert_eq!(bi.kept, 1, "an empty cpu_max alone is no burst");
        assert_eq!(c.trace.pods[0].usage.pattern, Pattern::Flat);
    }

    #[test]
    fn malformed_lines_are_counted_and_a_foreign_table_is_refused() {
        let t = Tables {
            machine_meta: "m_1,0,1,a,32,50,USING\nm_2,0,1,a,x,50,USING\nm_3,0,1\n".as_bytes(),
            container_meta: Some("c_1,m_1,0,a,started,100,100,1\n".as_bytes()),
            container_usage: None,
            batch_task: None,
            batch_instance: None,
        };
        let c = convert(t, &AlibabaOptions::default(), "test");
        let err = c.expect_err("must be refused").to_string();
        assert!(
            err.contains("machine_meta.csv: 2 of 3 data lines are malformed"),
            "{err}"
        );
        assert!(err.contains("line 2"), "{err}");

        let t = Tables {
            machine_meta: "m_1,0,1,a,32,50,USING\nm_2,0,1,a,32,50,USING\nm_3,0,1\n".as_bytes(),
            container_meta: Some("c_1,m_1,0,a,started,100,100,1\n".as_bytes()),
            container_usage: None,
            batch_task: None,
            batch_instance: None,
        };
        let c = convert(t, &AlibabaOptions::default(), "test").expect("converts");
        let mm = &c.report.tables["machine_meta.csv"];
        assert_eq!(mm.skipped["malformed: 3 fields, want 7"], (1, 3));
        assert_eq!(c.report.containers_without_usage, 1);
    }

    #[test]
    fn empty_results_and_bad_options_are_clear_errors() {
        let t = tables(MACHINES, "", "", "", "");
        let err = convert(t, &AlibabaOptions::default(), "test").expect_err("must be refused");
        assert!(err.to_string().starts_with("nothing to simulate"), "{err}");
        let t = tables(MACHINES, "", "", "", "");
        let o = AlibabaOptions {
            machine_memory_gib: 0.0,
            ..AlibabaOptions::default()
        };
        let err = convert(t, &o, "test").expect_err("must be refused");
        assert_eq!(
            err.to_string(),
            "option machine-memory-gib: must be a positive number, got 0"
        );
    }
}
