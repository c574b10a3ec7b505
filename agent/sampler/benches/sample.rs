//! Cost of one full sample (every collector) on this machine, in thread CPU time (the
//! target: ≤ 1 ms) and in wall time. Run: `cargo bench -p loadstar-sampler --bench sample`.
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loadstar_sampler::sampler::{Sampler, SamplerConfig};
use rustix::time::{ClockId, clock_gettime};

/// Thread CPU time (user + system) of the benchmarking thread, in nanoseconds.
struct ThreadCpuTime;

fn thread_cpu_nanos() -> u64 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_nanos()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_nanos().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self
    }
}

impl ValueFormatter for ThreadCpuTime {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        for v in values.iter_mut() {
            *v /= 1e3;
        }
        "µs (CPU)"
    }
    fn scale_throughputs(
        &self,
        _typical: f64,
        _t: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        for v in values.iter_mut() {
            *v = 1e9 / v.max(1.0);
        }
        "samples/s (CPU)"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn sampler() -> Sampler {
    let mut s = Sampler::new(SamplerConfig {
        node_name: "bench".into(),
        ..SamplerConfig::default()
    })
    .expect("default config is valid");
    // Past the first sample, so every rate has a delta and every window is populated.
    for _ in 0..3 {
        std::hint::black_box(s.sample());
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

fn cpu_time(c: &mut Criterion<ThreadCpuTime>) {
    let mut s = sampler();
    c.bench_function("sample/cpu_time", |b| {
        b.iter(|| std::hint::black_box(s.sample()))
    });
}

fn wall_time(c: &mut Criterion) {
    let mut s = sampler();
    c.bench_function("sample/wall_time", |b| {
        b.iter(|| std::hint::black_box(s.sample()))
    });
}

/// The benchmark groups (the macro generates undocumented public functions).
#[allow(missing_docs)]
mod groups {
    use super::*;
    criterion_group! {
        name = cpu;
        config = Criterion::default().with_measurement(ThreadCpuTime).measurement_time(Duration::from_secs(5));
        targets = cpu_time
    }
    criterion_group! {
        name = wall;
        config = Criterion::default().measurement_time(Duration::from_secs(5));
        targets = wall_time
    }
}
criterion_main!(groups::cpu, groups::wall);
