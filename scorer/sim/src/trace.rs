//! The workload trace: pods arriving over time with requests, limits, a run time and a
//! *real* usage time series that differs from the requests. Read from CSV (columns in
//! [`Trace::CSV_COLUMNS`], optional per-pod usage samples in a second CSV) or generated from
//! a seeded, documented class mix ([`TraceMix`]).
//!
//! Usage is a pure function of (pod, age): a mean per resource shaped by a pattern (flat,
//! sine, mean-preserving square-wave bursts), multiplied by deterministic noise that changes
//! every [`NOISE_PERIOD_SECONDS`], with memory ramping up over a warm-up. CPU usage is given in
//! millicores of a [`REFERENCE_GHZ`] core: on a node of f GHz a pod needs `cpu × REF/f`
//! millicores, so faster CPUs finish the same work with less CPU time — the heterogeneity
//! the seed paper's S(c) = cores × frequency captures and requests ignore.
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::csv::{CsvError, Table};
use super::mix;

/// CPU usage in a trace is in millicores of a core at this frequency, GHz.
pub const REFERENCE_GHZ: f64 = 2.5;
/// The noise factor of a pod changes every this many seconds of its age.
pub const NOISE_PERIOD_SECONDS: f64 = 5.0;
/// Memory starts at this fraction of its mean and ramps linearly to the mean over warm-up.
pub const WARMUP_START_RATIO: f64 = 0.3;

/// Errors reading or generating a trace.
#[derive(Debug, Error)]
pub enum TraceError {
    /// A trace file could not be read.
    #[error("trace file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A CSV table is malformed.
    #[error(transparent)]
    Csv(#[from] CsvError),
    /// A pod id appears twice, or usage samples name an unknown pod.
    #[error("trace: pod {pod:?}: {message}")]
    Pod {
        /// The pod id.
        pod: String,
        /// What is wrong.
        message: String,
    },
    /// A generator mix names an unknown class or has no positive weight.
    #[error("trace mix {mix:?}: {message}")]
    Mix {
        /// The mix as given.
        mix: String,
        /// What is wrong.
        message: String,
    },
}

/// The shape of a pod's usage over time around its mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Constant (plus noise).
    Flat,
    /// `1 + amplitude · sin(2π (age/period + phase))`.
    Sine,
    /// Square wave: `1 + amplitude` for the first `duty` of each period, then the level that
    /// keeps the mean at 1 (`1 − amplitude·duty/(1−duty)`, at least 0).
    Burst,
}

impl Pattern {
    /// CSV spelling.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Flat => "flat",
            Pattern::Sine => "sine",
            Pattern::Burst => "burst",
        }
    }

    fn parse(s: &str) -> Option<Pattern> {
        match s {
            "flat" => Some(Pattern::Flat),
            "sine" => Some(Pattern::Sine),
            "burst" => Some(Pattern::Burst),
            _ => None,
        }
    }
}

/// One usage sample of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// CPU, millicores of a [`REFERENCE_GHZ`] core.
    pub cpu_m: f64,
    /// Memory working set, MiB.
    pub memory_mib: f64,
    /// Network throughput, Mbit/s.
    pub net_mbps: f64,
    /// Disk throughput, MB/s.
    pub disk_mbps: f64,
    /// Utilisation of each of its GPUs, 0–1.
    pub gpu_util: f64,
}

/// How a pod's usage evolves: a shaped mean, or replayed samples.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageModel {
    /// Mean usage.
    pub mean: Usage,
    /// Shape of CPU, network and disk around the mean.
    pub pattern: Pattern,
    /// Period of the pattern, seconds.
    pub period_s: f64,
    /// Relative amplitude of the pattern.
    pub amplitude: f64,
    /// Fraction of a burst period at the high level (0–1, exclusive).
    pub duty: f64,
    /// Phase of the pattern, fraction of a period.
    pub phase: f64,
    /// Relative noise: each factor is uniform in `[1 − noise, 1 + noise]`.
    pub noise: f64,
    /// Memory warm-up, seconds (0: at its mean from the start).
    pub warmup_s: f64,
    /// Replayed samples `(age seconds, usage)`, sorted by age; when present they replace the
    /// shaped mean (each held until the next; the last held to the end).
    pub series: Option<Arc<Vec<(f64, Usage)>>>,
}

impl UsageModel {
    /// A flat, noiseless model at `mean`.
    pub fn flat(mean: Usage) -> UsageModel {
        UsageModel {
            mean,
            pattern: Pattern::Flat,
            period_s: 600.0,
            amplitude: 0.0,
            duty: 0.25,
            phase: 0.0,
            noise: 0.0,
            warmup_s: 0.0,
            series: None,
        }
    }

    /// The pattern's factor at `age_s`.
    fn shape(&self, age_s: f64) -> f64 {
        let x = (age_s / self.period_s.max(1.0) + self.phase).rem_euclid(1.0);
        match self.pattern {
            Pattern::Flat => 1.0,
            Pattern::Sine => 1.0 + self.amplitude * (2.0 * std::f64::consts::PI * x).sin(),
            Pattern::Burst => {
                let d = self.duty.clamp(0.01, 0.99);
                if x < d {
                    1.0 + self.amplitude
                } else {
                    1.0 - self.amplitude * d / (1.0 - d)
                }
            }
        }
        .max(0.0)
    }

    /// Usage at `age_s` seconds after the pod started; `key` decorrelates pods' noise.
    pub fn at(&self, age_s: f64, key: u64) -> Usage {
        if let Some(series) = &self.series {
            let i = series.partition_point(|(t, _)| *t <= age_s);
            return series
                .get(i.saturating_sub(1))
                .map(|s| s.1)
                .unwrap_or_default();
        }
        let tick = (age_s.max(0.0) / NOISE_PERIOD_SECONDS) as u64;
        let n = |salt: u64| 1.0 + self.noise * unit_noise(key ^ salt, tick);
        let f = self.shape(age_s);
        let ramp = if self.warmup_s > 0.0 {
            WARMUP_START_RATIO + (1.0 - WARMUP_START_RATIO) * (age_s / self.warmup_s).min(1.0)
        } else {
            1.0
        };
        Usage {
            cpu_m: (self.mean.cpu_m * f * n(1)).max(0.0),
            memory_mib: (self.mean.memory_mib * ramp * (1.0 + 0.25 * (n(2) - 1.0))).max(0.0),
            net_mbps: (self.mean.net_mbps * f * n(3)).max(0.0),
            disk_mbps: (self.mean.disk_mbps * f * n(4)).max(0.0),
            gpu_util: (self.mean.gpu_util * n(5)).clamp(0.0, 1.0),
        }
    }
}

/// splitmix64: a well-mixed 64-bit hash step.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Deterministic noise in `[-1, 1)` for (key, tick).
pub fn unit_noise(key: u64, tick: u64) -> f64 {
    let h = splitmix64(key ^ splitmix64(tick));
    (h >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// A stable 64-bit hash of a string (FNV-1a), independent of the process.
pub fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One pod of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSpec {
    /// Unique id (the pod's name and UID).
    pub id: String,
    /// Arrival time, seconds from the start.
    pub arrival_s: f64,
    /// Run time once started, seconds; 0 runs to the end of the simulation.
    pub duration_s: f64,
    /// Workload class, for reports (`service`, `batch`, …).
    pub class: String,
    /// Controller name (pods of one owner are spread by SelectorSpread).
    pub owner: String,
    /// CPU request, millicores (0: none).
    pub cpu_request_m: i64,
    /// Memory request, MiB (0: none).
    pub memory_request_mib: i64,
    /// CPU limit, millicores (0: none); real CPU usage is capped at it.
    pub cpu_limit_m: i64,
    /// Memory limit, MiB (0: none); real memory usage is capped at it.
    pub memory_limit_mib: i64,
    /// `nvidia.com/gpu` request (= limit).
    pub gpus: i64,
    /// Real usage.
    pub usage: UsageModel,
}

/// The workload: pods sorted by arrival (then by file/generation order).
#[derive(Debug, Clone)]
pub struct Trace {
    /// The pods.
    pub pods: Arc<Vec<PodSpec>>,
}

impl Trace {
    /// A trace of these pods (stably sorted by arrival; ids must be unique).
    pub fn new(mut pods: Vec<PodSpec>) -> Result<Trace, TraceError> {
        pods.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        let mut seen = HashMap::with_capacity(pods.len());
        for p in &pods {
            if seen.insert(p.id.as_str(), ()).is_some() {
                return Err(TraceError::Pod {
                    pod: p.id.clone(),
                    message: "id appears twice".into(),
                });
            }
        }
        Ok(Trace {
            pods: Arc::new(pods),
        })
    }

    /// Column names of the trace CSV.
    pub const CSV_COLUMNS: &'static [&'static str] = &[
        "id",
        "arrival_s",
        "duration_s",
        "class",
        "owner",
        "cpu_request_m",
        "memory_request_mib",
        "cpu_limit_m",
        "memory_limit_mib",
        "gpus",
        "cpu_usage_m",
        "memory_usage_mib",
        "net_mbps",
        "disk_mbps",
        "gpu_util",
        "pattern",
        "period_s",
        "amplitude",
        "duty",
        "phase",
        "noise",
        "warmup_s",
    ];

    /// Required trace CSV columns.
    pub const CSV_REQUIRED: &'static [&'static str] = &[
        "id",
        "arrival_s",
        "duration_s",
        "cpu_request_m",
        "memory_request_mib",
        "cpu_usage_m",
        "memory_usage_mib",
    ];

    /// Column names of the optional usage-samples CSV.
    pub const USAGE_COLUMNS: &'static [&'static str] = &[
        "pod",
        "offset_s",
        "cpu_m",
        "memory_mib",
        "net_mbps",
        "disk_mbps",
        "gpu_util",
    ];

    /// Reads a trace CSV and, optionally, a usage-samples CSV.
    pub fn from_files(path: &Path, usage: Option<&Path>) -> Result<Trace, TraceError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| TraceError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        let text = read(path)?;
        let usage_text = usage.map(read).transpose()?;
        Trace::from_csv(
            &path.display().to_string(),
            &text,
            usage.map(|p| p.display().to_string()).as_deref(),
            usage_text.as_deref(),
        )
    }

    /// Parses a trace CSV (and optional usage samples: `pod,offset_s,cpu_m,…`, which replace
    /// the shaped usage of the pods they name).
    pub fn from_csv(
        name: &str,
        text: &str,
        usage_name: Option<&str>,
        usage_text: Option<&str>,
    ) -> Result<Trace, TraceError> {
        let t = Table::parse(name, text, Self::CSV_COLUMNS, Self::CSV_REQUIRED)?;
        let mut pods = Vec::with_capacity(t.len());
        for r in t.rows() {
            let pattern = match r.raw("pattern") {
                None => Pattern::Flat,
                Some(p) => Pattern::parse(p).ok_or_else(|| {
                    r.error("pattern", format!("{p:?} is not flat, sine or burst"))
                })?,
            };
            let duty = r.nonneg_or("duty", 0.25)?;
            if !(duty > 0.0 && duty < 1.0) {
                return Err(r.error("duty", format!("{duty} must be in (0, 1)")).into());
            }
            let id: String = r.get("id")?;
            let class = r.get_or("class", "custom".to_string())?;
            pods.push(PodSpec {
                owner: r.get_or("owner", id.clone())?,
                arrival_s: r.nonneg("arrival_s")?,
                duration_s: r.nonneg("duration_s")?,
                class,
                cpu_request_m: r.nonneg("cpu_request_m")?.round() as i64,
                memory_request_mib: r.nonneg("memory_request_mib")?.round() as i64,
                cpu_limit_m: r.nonneg_or("cpu_limit_m", 0.0)?.round() as i64,
                memory_limit_mib: r.nonneg_or("memory_limit_mib", 0.0)?.round() as i64,
                gpus: r.nonneg_or("gpus", 0.0)?.round() as i64,
                usage: UsageModel {
                    mean: Usage {
                        cpu_m: r.nonneg("cpu_usage_m")?,
                        memory_mib: r.nonneg("memory_usage_mib")?,
                        net_mbps: r.nonneg_or("net_mbps", 0.0)?,
                        disk_mbps: r.nonneg_or("disk_mbps", 0.0)?,
                        gpu_util: r.nonneg_or("gpu_util", 0.0)?.min(1.0),
                    },
                    pattern,
                    period_s: r.nonneg_or("period_s", 600.0)?.max(1.0),
                    amplitude: r.nonneg_or("amplitude", 0.0)?,
                    duty,
                    phase: r.nonneg_or("phase", 0.0)?,
                    noise: r.nonneg_or("noise", 0.0)?.min(1.0),
                    warmup_s: r.nonneg_or("warmup_s", 0.0)?,
                    series: None,
                },
                id,
            });
        }
        if let Some(u) = usage_text {
            let ut = Table::parse(
                usage_name.unwrap_or("usage"),
                u,
                Self::USAGE_COLUMNS,
                &["pod", "offset_s", "cpu_m", "memory_mib"],
            )?;
            let mut series: HashMap<String, Vec<(f64, Usage)>> = HashMap::new();
            for r in ut.rows() {
                series.entry(r.get("pod")?).or_default().push((
                    r.nonneg("offset_s")?,
                    Usage {
                        cpu_m: r.nonneg("cpu_m")?,
                        memory_mib: r.nonneg("memory_mib")?,
                        net_mbps: r.nonneg_or("net_mbps", 0.0)?,
                        disk_mbps: r.nonneg_or("disk_mbps", 0.0)?,
                        gpu_util: r.nonneg_or("gpu_util", 0.0)?.min(1.0),
                    },
                ));
            }
            for p in &mut pods {
                if let Some(mut s) = series.remove(&p.id) {
                    s.sort_by(|a, b| a.0.total_cmp(&b.0));
                    p.usage.series = Some(Arc::new(s));
                }
            }
            if let Some(pod) = series.keys().min() {
                return Err(TraceError::Pod {
                    pod: pod.clone(),
                    message: "usage samples for a pod the trace does not have".into(),
                });
            }
        }
        Trace::new(pods)
    }

    /// The trace as CSV (the format [`Trace::from_csv`] reads; replayed series are not
    /// written).
    pub fn to_csv(&self) -> String {
        let mut out = Self::CSV_COLUMNS.join(",");
        out.push('\n');
        for p in self.pods.iter() {
            let u = &p.usage;
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{:.1},{:.1},{:.2},{:.2},{:.3},{},{:.0},{:.3},{:.3},{:.3},{:.3},{:.0}\n",
                p.id,
                p.arrival_s,
                p.duration_s,
                p.class,
                p.owner,
                p.cpu_request_m,
                p.memory_request_mib,
                p.cpu_limit_m,
                p.memory_limit_mib,
                p.gpus,
                u.mean.cpu_m,
                u.mean.memory_mib,
                u.mean.net_mbps,
                u.mean.disk_mbps,
                u.mean.gpu_util,
                u.pattern.name(),
                u.period_s,
                u.amplitude,
                u.duty,
                u.phase,
                u.noise,
                u.warmup_s
            ));
        }
        out
    }

    /// The replayed usage series as the usage-samples CSV (the format [`Trace::from_csv`]
    /// reads with the trace); pods without a series are absent.
    pub fn usage_csv(&self) -> String {
        let mut out = Self::USAGE_COLUMNS.join(",");
        out.push('\n');
        for p in self.pods.iter() {
            for (offset, u) in p.usage.series.iter().flat_map(|s| s.iter()) {
                out.push_str(&format!(
                    "{},{},{:.1},{:.1},{:.2},{:.2},{:.3}\n",
                    p.id, offset, u.cpu_m, u.memory_mib, u.net_mbps, u.disk_mbps, u.gpu_util
                ));
            }
        }
        out
    }

    /// Generates `count` pods of `mix` arriving uniformly at random over
    /// `[0, arrival_window_s)`, deterministically for `seed`.
    pub fn generate(count: usize, mix: &TraceMix, arrival_window_s: f64, seed: u64) -> Trace {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x0074_7261_6365);
        let weights: Vec<f64> = mix.entries.iter().map(|(_, w)| *w).collect();
        let counts = super::cluster::largest_remainder(count, &weights);
        let mut classes: Vec<TraceClass> = Vec::with_capacity(count);
        for ((c, _), n) in mix.entries.iter().zip(counts) {
            classes.extend(std::iter::repeat_n(*c, n));
        }
        rand::seq::SliceRandom::shuffle(classes.as_mut_slice(), &mut rng);
        let mut arrivals: Vec<f64> = (0..count)
            .map(|_| (rng.random::<f64>() * arrival_window_s).floor())
            .collect();
        arrivals.sort_by(f64::total_cmp);
        let width = count.saturating_sub(1).to_string().len().max(4);
        let pods = classes
            .into_iter()
            .zip(arrivals)
            .enumerate()
            .map(|(i, (class, arrival_s))| {
                class.sample(format!("{}-{i:0width$}", class.name()), arrival_s, &mut rng)
            })
            .collect();
        // Ids are unique by construction.
        Trace::new(pods).unwrap_or_else(|_| Trace {
            pods: Arc::new(Vec::new()),
        })
    }

    /// A day compressed into `arrival_window_s`: arrivals follow `1 − 0.8·cos(2πt/day)` (few
    /// at night, most around midday) and the long-running classes' usage (services, caches,
    /// proxies) swings ±`amplitude` around its mean with the same clock — a sine of period one
    /// day whose phase follows the pod's arrival, so every pod peaks at midday whatever its
    /// age. Otherwise as [`Trace::generate`].
    pub fn generate_diurnal(
        count: usize,
        mix: &TraceMix,
        arrival_window_s: f64,
        amplitude: f64,
        seed: u64,
    ) -> Trace {
        let day = arrival_window_s.max(1.0);
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6469_7572_6e61);
        let base = Trace::generate(count, mix, arrival_window_s, seed);
        // Rejection sampling of the arrival density (peak 1.8, trough 0.2).
        let density = |t: f64| 1.0 - 0.8 * (2.0 * std::f64::consts::PI * t / day).cos();
        let mut arrivals: Vec<f64> = Vec::with_capacity(count);
        while arrivals.len() < count {
            let t = rng.random::<f64>() * day;
            if rng.random::<f64>() * 1.8 <= density(t) {
                arrivals.push(t.floor());
            }
        }
        arrivals.sort_by(f64::total_cmp);
        let pods = base
            .pods
            .iter()
            .zip(arrivals)
            .map(|(p, arrival_s)| {
                let mut p = p.clone();
                p.arrival_s = arrival_s;
                if matches!(p.class.as_str(), "service" | "cache" | "proxy") {
                    p.usage.pattern = Pattern::Sine;
                    p.usage.period_s = day;
                    p.usage.amplitude = amplitude.clamp(0.0, 1.0);
                    // sin peaks at a quarter period: midday (t = day/2) for every pod.
                    p.usage.phase = (arrival_s / day - 0.25).rem_euclid(1.0);
                }
                p
            })
            .collect();
        Trace::new(pods).unwrap_or_else(|_| Trace {
            pods: Arc::new(Vec::new()),
        })
    }

    /// [`Trace::generate`] with `bursts` herds: at evenly spaced instants, `burst_size`
    /// identical pods (one sampled pod of `class`, copied) arrive in the same second — the
    /// case where many pods are placed before the first one's load shows in any window.
    pub fn generate_herd(
        count: usize,
        mix: &TraceMix,
        arrival_window_s: f64,
        bursts: usize,
        burst_size: usize,
        class: TraceClass,
        seed: u64,
    ) -> Trace {
        let herd = bursts.saturating_mul(burst_size).min(count);
        let base = Trace::generate(count - herd, mix, arrival_window_s, seed);
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6865_7264);
        let mut pods: Vec<PodSpec> = base.pods.as_ref().clone();
        for b in 0..bursts {
            let at = ((b as f64 + 0.5) / bursts.max(1) as f64 * arrival_window_s).floor();
            let template = class.sample(format!("herd{b}"), at, &mut rng);
            for i in 0..burst_size {
                if pods.len() >= count {
                    break;
                }
                let mut p = template.clone();
                p.id = format!("herd{b}-{i:03}");
                p.owner = format!("herd{b}");
                pods.push(p);
            }
        }
        pods.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        Trace::new(pods).unwrap_or_else(|_| Trace {
            pods: Arc::new(Vec::new()),
        })
    }

    /// Number of pods.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// True when there are no pods.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// A workload class of the generator (see `docs/simulator.md` for the figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceClass {
    /// Over-requesting long-running web/API services: use 15–45 % of their CPU request,
    /// daily-like sine.
    Service,
    /// Bursty batch jobs: mean 80–150 % of the CPU request, bursts to 2–3× in 25 % duty,
    /// limit 4× request.
    Batch,
    /// Memory-heavy caches: memory 90–120 % of the request, warming up over 5–15 min.
    Cache,
    /// Network-heavy proxies: 300–2000 Mbit/s.
    Proxy,
    /// IO-heavy jobs: 100–400 MB/s of disk in bursts.
    Io,
    /// Pods without requests (BestEffort) that use 300–1500 m.
    BestEffort,
    /// Training pods with 1 GPU.
    Gpu1,
    /// Training pods with 2 GPUs.
    Gpu2,
    /// Training pods with 4 GPUs.
    Gpu4,
    /// Training pods with 8 GPUs.
    Gpu8,
}

/// Every class, in mix order.
pub const TRACE_CLASSES: &[TraceClass] = &[
    TraceClass::Service,
    TraceClass::Batch,
    TraceClass::Cache,
    TraceClass::Proxy,
    TraceClass::Io,
    TraceClass::BestEffort,
    TraceClass::Gpu1,
    TraceClass::Gpu2,
    TraceClass::Gpu4,
    TraceClass::Gpu8,
];

fn uniform(rng: &mut StdRng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

impl TraceClass {
    /// Name in mixes and ids.
    pub fn name(self) -> &'static str {
        match self {
            TraceClass::Service => "service",
            TraceClass::Batch => "batch",
            TraceClass::Cache => "cache",
            TraceClass::Proxy => "proxy",
            TraceClass::Io => "io",
            TraceClass::BestEffort => "besteffort",
            TraceClass::Gpu1 => "gpu1",
            TraceClass::Gpu2 => "gpu2",
            TraceClass::Gpu4 => "gpu4",
            TraceClass::Gpu8 => "gpu8",
        }
    }

    /// Draws one pod of this class.
    pub fn sample(self, id: String, arrival_s: f64, rng: &mut StdRng) -> PodSpec {
        const MIN: f64 = 60.0;
        const HOUR: f64 = 3600.0;
        let mut pod = PodSpec {
            id,
            arrival_s,
            duration_s: 0.0,
            class: self.name().to_string(),
            owner: String::new(),
            cpu_request_m: 0,
            memory_request_mib: 0,
            cpu_limit_m: 0,
            memory_limit_mib: 0,
            gpus: 0,
            usage: UsageModel::flat(Usage::default()),
        };
        let u = &mut pod.usage;
        u.noise = 0.1;
        u.phase = rng.random::<f64>();
        match self {
            TraceClass::Service => {
                pod.owner = format!("svc-{}", rng.random_range(0..40));
                pod.cpu_request_m = pick(rng, &[500, 1000, 2000]);
                pod.memory_request_mib = pick(rng, &[512, 1024, 2048]);
                pod.duration_s = uniform(rng, 2.0 * HOUR, 6.0 * HOUR).round();
                u.mean.cpu_m = pod.cpu_request_m as f64 * uniform(rng, 0.15, 0.45);
                u.mean.memory_mib = pod.memory_request_mib as f64 * uniform(rng, 0.4, 0.8);
                u.mean.net_mbps = uniform(rng, 5.0, 50.0);
                u.mean.disk_mbps = uniform(rng, 1.0, 5.0);
                u.pattern = Pattern::Sine;
                u.period_s = uniform(rng, 600.0, 3600.0).round();
                u.amplitude = uniform(rng, 0.3, 0.6);
            }
            TraceClass::Batch => {
                pod.owner = format!("job-{}", rng.random_range(0..100));
                pod.cpu_request_m = pick(rng, &[500, 1000, 2000]);
                pod.cpu_limit_m = 4 * pod.cpu_request_m;
                pod.memory_request_mib = pick(rng, &[1024, 2048, 4096]);
                pod.duration_s = uniform(rng, 5.0 * MIN, 40.0 * MIN).round();
                u.mean.cpu_m = pod.cpu_request_m as f64 * uniform(rng, 0.8, 1.5);
                u.mean.memory_mib = pod.memory_request_mib as f64 * uniform(rng, 0.5, 1.0);
                u.mean.disk_mbps = uniform(rng, 10.0, 50.0);
                u.mean.net_mbps = uniform(rng, 1.0, 20.0);
                u.pattern = Pattern::Burst;
                u.period_s = uniform(rng, 60.0, 600.0).round();
                u.amplitude = uniform(rng, 1.0, 2.0);
                u.duty = 0.25;
            }
            TraceClass::Cache => {
                pod.owner = format!("cache-{}", rng.random_range(0..10));
                pod.cpu_request_m = pick(rng, &[250, 500]);
                pod.memory_request_mib = pick(rng, &[4096, 8192, 16384]);
                pod.memory_limit_mib = pod.memory_request_mib * 3 / 2;
                pod.duration_s = uniform(rng, 2.0 * HOUR, 6.0 * HOUR).round();
                u.mean.cpu_m = pod.cpu_request_m as f64 * uniform(rng, 0.3, 0.6);
                u.mean.memory_mib = pod.memory_request_mib as f64 * uniform(rng, 0.9, 1.2);
                u.mean.net_mbps = uniform(rng, 20.0, 100.0);
                u.warmup_s = uniform(rng, 5.0 * MIN, 15.0 * MIN).round();
                u.pattern = Pattern::Flat;
            }
            TraceClass::Proxy => {
                pod.owner = format!("proxy-{}", rng.random_range(0..10));
                pod.cpu_request_m = pick(rng, &[250, 500, 1000]);
                pod.memory_request_mib = pick(rng, &[256, 512]);
                pod.duration_s = uniform(rng, 2.0 * HOUR, 6.0 * HOUR).round();
                u.mean.cpu_m = pod.cpu_request_m as f64 * uniform(rng, 0.5, 1.0);
                u.mean.memory_mib = pod.memory_request_mib as f64 * uniform(rng, 0.5, 0.9);
                u.mean.net_mbps = uniform(rng, 300.0, 2000.0);
                u.pattern = Pattern::Sine;
                u.period_s = uniform(rng, 600.0, 3600.0).round();
                u.amplitude = uniform(rng, 0.2, 0.5);
            }
            TraceClass::Io => {
                pod.owner = format!("etl-{}", rng.random_range(0..20));
                pod.cpu_request_m = pick(rng, &[500, 1000]);
                pod.memory_request_mib = pick(rng, &[1024, 2048]);
                pod.duration_s = uniform(rng, 10.0 * MIN, 60.0 * MIN).round();
                u.mean.cpu_m = pod.cpu_request_m as f64 * uniform(rng, 0.4, 0.8);
                u.mean.memory_mib = pod.memory_request_mib as f64 * uniform(rng, 0.5, 0.9);
                u.mean.disk_mbps = uniform(rng, 100.0, 400.0);
                u.mean.net_mbps = uniform(rng, 10.0, 100.0);
                u.pattern = Pattern::Burst;
                u.period_s = uniform(rng, 120.0, 600.0).round();
                u.amplitude = uniform(rng, 0.5, 1.0);
                u.duty = 0.5;
            }
            TraceClass::BestEffort => {
                pod.owner = format!("adhoc-{}", rng.random_range(0..20));
                pod.duration_s = uniform(rng, 10.0 * MIN, 2.0 * HOUR).round();
                u.mean.cpu_m = uniform(rng, 300.0, 1500.0);
                u.mean.memory_mib = uniform(rng, 256.0, 1024.0);
                u.mean.net_mbps = uniform(rng, 1.0, 20.0);
                u.mean.disk_mbps = uniform(rng, 1.0, 20.0);
                u.noise = 0.2;
            }
            TraceClass::Gpu1 | TraceClass::Gpu2 | TraceClass::Gpu4 | TraceClass::Gpu8 => {
                let g = match self {
                    TraceClass::Gpu1 => 1,
                    TraceClass::Gpu2 => 2,
                    TraceClass::Gpu4 => 4,
                    _ => 8,
                };
                pod.owner = format!("train-{}", rng.random_range(0..20));
                pod.gpus = g;
                pod.cpu_request_m = 8000 * g;
                pod.memory_request_mib = 65_536 * g;
                pod.duration_s = uniform(rng, 30.0 * MIN, 3.0 * HOUR).round();
                u.mean.cpu_m = pod.cpu_request_m as f64 * uniform(rng, 0.5, 0.9);
                u.mean.memory_mib = pod.memory_request_mib as f64 * uniform(rng, 0.6, 0.9);
                u.mean.gpu_util = uniform(rng, 0.7, 1.0);
                u.mean.net_mbps = uniform(rng, 1000.0, 5000.0) * g as f64;
                u.mean.disk_mbps = uniform(rng, 50.0, 200.0);
                u.warmup_s = 120.0;
                u.noise = 0.05;
            }
        }
        pod
    }
}

/// A weighted mix of trace classes.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceMix {
    /// (class, weight) pairs.
    pub entries: Vec<(TraceClass, f64)>,
}

/// The default mix of the generator.
pub const DEFAULT_TRACE_MIX: &str = "service=35,batch=25,cache=10,proxy=10,io=10,besteffort=10";
/// The GPU mix: 1/2/4/8-GPU training pods, 40/30/20/10.
pub const GPU_TRACE_MIX: &str = "gpu1=40,gpu2=30,gpu4=20,gpu8=10";

impl Default for TraceMix {
    /// [`DEFAULT_TRACE_MIX`].
    fn default() -> Self {
        TraceMix::parse(DEFAULT_TRACE_MIX).unwrap_or(TraceMix {
            entries: Vec::new(),
        })
    }
}

impl TraceMix {
    /// Parses `class=weight,…` (class names of [`TRACE_CLASSES`]).
    pub fn parse(spec: &str) -> Result<TraceMix, TraceError> {
        let entries =
            mix::parse(spec, TRACE_CLASSES, |c| c.name()).map_err(|message| TraceError::Mix {
                mix: spec.to_string(),
                message,
            })?;
        Ok(TraceMix { entries })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_diurnal_trace_arrives_by_day_and_its_services_peak_at_midday() {
        let day = 8.0 * 3600.0;
        let t = Trace::generate_diurnal(2000, &TraceMix::default(), day, 0.5, 3);
        assert_eq!(t.len(), 2000);
        let in_range = |a: f64, b: f64| {
            t.pods
                .iter()
                .filter(|p| p.arrival_s >= a * day && p.arrival_s < b * day)
                .count()
        };
        // Density 1 − 0.8·cos: the midday eighth gets ~1.8/0.2-ish more than the first.
        assert!(
            in_range(0.4375, 0.5625) > 3 * in_range(0.0, 0.125),
            "midday {} vs night {}",
            in_range(0.4375, 0.5625),
            in_range(0.0, 0.125)
        );
        let services: Vec<&PodSpec> = t.pods.iter().filter(|p| p.class == "service").collect();
        assert!(!services.is_empty());
        for p in services.iter().take(50) {
            // Whatever its arrival, at wall-clock midday a service is at its peak (1.5×) and at
            // midnight at its trough (0.5×).
            let midday = p.usage.shape(day / 2.0 - p.arrival_s + day);
            let midnight = p.usage.shape(day - p.arrival_s);
            assert!((midday - 1.5).abs() < 1e-9, "{midday}");
            assert!((midnight - 0.5).abs() < 1e-9, "{midnight}");
        }
    }

    #[test]
    fn a_herd_arrives_in_one_second_as_identical_pods() {
        let t = Trace::generate_herd(
            1000,
            &TraceMix::default(),
            3600.0,
            4,
            50,
            TraceClass::Batch,
            9,
        );
        assert_eq!(t.len(), 1000);
        let herd: Vec<&PodSpec> = t.pods.iter().filter(|p| p.owner == "herd2").collect();
        assert_eq!(herd.len(), 50);
        assert!(herd.iter().all(|p| p.arrival_s == herd[0].arrival_s
            && p.cpu_request_m == herd[0].cpu_request_m
            && p.usage == herd[0].usage
            && p.class == "batch"));
        assert_eq!(herd[0].arrival_s, (2.5 / 4.0 * 3600.0_f64).floor());
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_trace_is_deterministic_and_round_trips_through_csv() {
        let a = Trace::generate(200, &TraceMix::default(), 3600.0, 42);
        let b = Trace::generate(200, &TraceMix::default(), 3600.0, 42);
        assert_eq!(a.pods, b.pods);
        assert_eq!(a.len(), 200);
        assert!(a.pods.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        let count = |c: &str| a.pods.iter().filter(|p| p.class == c).count();
        assert_eq!(
            (count("service"), count("batch"), count("besteffort")),
            (70, 50, 20)
        );
        let back = Trace::from_csv("t", &a.to_csv(), None, None).expect("csv");
        assert_eq!(back.len(), a.len());
        for (x, y) in back.pods.iter().zip(a.pods.iter()) {
            assert_eq!(
                (x.id.as_str(), x.cpu_request_m, x.gpus),
                (y.id.as_str(), y.cpu_request_m, y.gpus)
            );
            assert!((x.usage.mean.cpu_m - y.usage.mean.cpu_m).abs() < 0.06);
        }
    }

    #[test]
    fn burst_keeps_its_mean_and_series_replay_holds_values() {
        let mut m = UsageModel::flat(Usage {
            cpu_m: 100.0,
            ..Default::default()
        });
        m.pattern = Pattern::Burst;
        m.amplitude = 2.0;
        m.duty = 0.25;
        m.period_s = 100.0;
        let mean: f64 = (0..100).map(|s| m.at(s as f64, 1).cpu_m).sum::<f64>() / 100.0;
        assert!((mean - 100.0).abs() < 1e-9, "{mean}");
        assert_eq!(m.at(10.0, 1).cpu_m, 300.0);
        let t = Trace::from_csv(
            "t",
            "id,arrival_s,duration_s,cpu_request_m,memory_request_mib,cpu_usage_m,memory_usage_mib\np,0,0,100,100,50,50\n",
            Some("u"),
            Some("pod,offset_s,cpu_m,memory_mib\np,0,10,1\np,60,20,2\n"),
        )
        .expect("valid");
        let u = &t.pods[0].usage;
        assert_eq!(u.at(59.0, 0).cpu_m, 10.0);
        assert_eq!(u.at(600.0, 0).cpu_m, 20.0);
        let err = Trace::from_csv(
            "t",
            "id,arrival_s,duration_s,cpu_request_m,memory_request_mib,cpu_usage_m,memory_usage_mib\np,0,0,100,100,50,50\n",
            Some("u"),
            Some("pod,offset_s,cpu_m,memory_mib\nq,0,10,1\n"),
        )
        .expect_err("unknown pod");
        assert!(err.to_string().contains("\"q\""), "{err}");
    }

    proptest! {
        /// Usage is never negative or NaN, whatever the shape parameters.
        #[test]
        fn usage_is_finite_and_nonnegative(
            amp in 0.0f64..5.0, duty in 0.01f64..0.99, noise in 0.0f64..1.0,
            age in 0.0f64..1e6, key in any::<u64>(), pat in 0usize..3,
        ) {
            let mut m = UsageModel::flat(Usage { cpu_m: 500.0, memory_mib: 100.0, net_mbps: 10.0, disk_mbps: 5.0, gpu_util: 0.9 });
            m.pattern = [Pattern::Flat, Pattern::Sine, Pattern::Burst][pat];
            m.amplitude = amp; m.duty = duty; m.noise = noise; m.warmup_s = 100.0;
            let u = m.at(age, key);
            for v in [u.cpu_m, u.memory_mib, u.net_mbps, u.disk_mbps, u.gpu_util] {
                prop_assert!(v.is_finite() && v >= 0.0);
            }
            prop_assert!(u.gpu_util <= 1.0);
        }
    }
}
