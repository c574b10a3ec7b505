//! Cost of one sample pushed into the default three windows (60/300/900 samples), and of a
//! full summary (with p95), the agent's per-report work.
// criterion's macros generate undocumented public items.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use loadstar_common::window::WindowSet;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let mut set = WindowSet::for_interval(&[60, 300, 900], 1.0).expect("valid windows");
    let mut x = 0.5f64;
    for _ in 0..2000 {
        x = (x * 3.7 * (1.0 - x)).clamp(0.0, 1.0);
        set.push(x).expect("finite");
    }
    c.bench_function("window_push_3_windows", |b| {
        b.iter(|| {
            x = (x * 3.7 * (1.0 - x)).clamp(0.0, 1.0);
            set.push(black_box(x)).expect("finite");
        })
    });
    c.bench_function("window_summaries_3_windows", |b| {
        b.iter(|| black_box(set.summaries()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
