//! `loadstar-burner`: the workload of the end-to-end suite's pods on a real node — burns a
//! given number of millicores and holds a given amount of resident memory until killed, so
//! that the agent's per-pod readings can be checked against the container's own cgroup.
//!
//! Usage: `loadstar-burner [--cpu-millicores N] [--memory-mib M] [--seconds S]
//! [--share-dir DIR]` (defaults 500, 0, forever). With `--share-dir` the pods of a workload
//! share one demand, as replicas behind a load balancer do: `DIR/demand` holds the total
//! millicores (the test rewrites it to step the load), each replica marks itself alive in
//! `DIR/peers/<hostname>` every second and burns `demand / live replicas` (a replica is live
//! while its mark is under 3 s old), so scaling out lowers each pod's usage as it would for a
//! real service. Only the standard library: the image stays a static-free,
//! dependency-free copy on the minimal base. As PID 1 in a container it has no SIGTERM
//! handler, so pods running it should set a short `terminationGracePeriodSeconds`.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Each burning thread works for its share of this period and sleeps the rest.
const PERIOD: Duration = Duration::from_millis(100);
const PAGE: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
struct Args {
    cpu_millicores: u64,
    memory_mib: u64,
    seconds: Option<u64>,
    share_dir: Option<PathBuf>,
}

/// How long a replica's mark counts it as live.
const LIVE: Duration = Duration::from_secs(3);
/// Most burning threads (the shared demand per pod is capped at this many cores).
const MAX_THREADS: u64 = 4;

fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        cpu_millicores: 500,
        memory_mib: 0,
        seconds: None,
        share_dir: None,
    };
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.clone(), None),
        };
        let value = match inline {
            Some(v) => v,
            None => it.next().ok_or_else(|| format!("{name} needs a value"))?,
        };
        if name == "--share-dir" {
            out.share_dir = Some(PathBuf::from(value));
            continue;
        }
        let number: u64 = value
            .parse()
            .map_err(|_| format!("{name}: not a whole number: {value:?}"))?;
        match name.as_str() {
            "--cpu-millicores" if number <= 64_000 => out.cpu_millicores = number,
            "--memory-mib" if number <= 1 << 20 => out.memory_mib = number,
            "--seconds" => out.seconds = Some(number),
            "--cpu-millicores" | "--memory-mib" => {
                return Err(format!("{name}: {number} is too large"));
            }
            _ => return Err(format!("unknown flag {name}")),
        }
    }
    Ok(out)
}

/// Busy share of each thread: `millicores` spread over as few threads as possible.
fn shares(millicores: u64) -> Vec<f64> {
    let mut left = millicores;
    let mut out = Vec::new();
    while left > 0 {
        let this = left.min(1000);
        out.push(this as f64 / 1000.0);
        left -= this;
    }
    out
}

/// Each replica's part of a shared demand.
fn per_replica(demand_millicores: u64, live: usize) -> u64 {
    demand_millicores / (live.max(1) as u64)
}

/// Thread `index`'s busy share of `millicores` (thread 0 takes the first core, and so on).
fn thread_share(millicores: u64, index: u64) -> f64 {
    (millicores.saturating_sub(index * 1000).min(1000)) as f64 / 1000.0
}

/// Marks this replica live and returns the shared demand and the live replicas.
fn share_round(dir: &Path, me: &str) -> std::io::Result<(u64, usize)> {
    let peers = dir.join("peers");
    std::fs::create_dir_all(&peers)?;
    std::fs::write(peers.join(me), b"")?;
    let demand = std::fs::read_to_string(dir.join("demand"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let now = SystemTime::now();
    let mut live = 0;
    for e in std::fs::read_dir(&peers)?.flatten() {
        let fresh = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age < LIVE);
        live += usize::from(fresh);
    }
    Ok((demand, live))
}

/// Burns thread `index`'s share of the current target, re-read every period.
fn burn_shared(target: Arc<AtomicU64>, index: u64) -> ! {
    loop {
        let busy = PERIOD.mul_f64(thread_share(target.load(Ordering::Relaxed), index));
        let start = Instant::now();
        while start.elapsed() < busy {
            std::hint::spin_loop();
        }
        if let Some(rest) = PERIOD.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

fn burn(share: f64) -> ! {
    let busy = PERIOD.mul_f64(share);
    loop {
        let start = Instant::now();
        while start.elapsed() < busy {
            std::hint::spin_loop();
        }
        if let Some(rest) = PERIOD.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

fn main() {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("loadstar-burner: {e}");
            std::process::exit(2);
        }
    };
    let mut memory = vec![0u8; (args.memory_mib as usize) << 20];
    let target = Arc::new(AtomicU64::new(0));
    let me = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    if args.share_dir.is_some() {
        for index in 0..MAX_THREADS {
            let t = target.clone();
            std::thread::spawn(move || burn_shared(t, index));
        }
        eprintln!(
            "loadstar-burner: sharing the demand in {:?} as {me}",
            args.share_dir
        );
    } else {
        for share in shares(args.cpu_millicores) {
            std::thread::spawn(move || burn(share));
        }
        eprintln!(
            "loadstar-burner: {} millicores, {} MiB",
            args.cpu_millicores, args.memory_mib
        );
    }
    let mut last = None;
    let start = Instant::now();
    let mut round: u8 = 0;
    loop {
        // Touch every page so the memory stays resident (and counted by the cgroup).
        round = round.wrapping_add(1);
        for page in memory.chunks_mut(PAGE) {
            page[0] = round;
        }
        if let Some(dir) = &args.share_dir {
            match share_round(dir, &me) {
                Ok((demand, live)) => {
                    let mine = per_replica(demand, live).min(MAX_THREADS * 1000);
                    target.store(mine, Ordering::Relaxed);
                    if last != Some((demand, live)) {
                        eprintln!(
                            "loadstar-burner: demand {demand}m over {live} replicas: {mine}m"
                        );
                        last = Some((demand, live));
                    }
                }
                Err(e) => eprintln!("loadstar-burner: {}: {e}", dir.display()),
            }
        }
        if args
            .seconds
            .is_some_and(|s| start.elapsed() >= Duration::from_secs(s))
        {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_flags_in_both_spellings_and_refuses_nonsense() {
        let a =
            parse(strings(&["--cpu-millicores", "1500", "--memory-mib=64"])).expect("valid flags");
        assert_eq!(
            a,
            Args {
                cpu_millicores: 1500,
                memory_mib: 64,
                seconds: None,
                share_dir: None
            }
        );
        let a = parse(strings(&["--share-dir", "/x", "--memory-mib=1"])).expect("valid");
        assert_eq!(a.share_dir, Some(PathBuf::from("/x")));
        assert!(parse(strings(&["--cpu-millicores", "lots"])).is_err());
        assert!(parse(strings(&["--memory-mib"])).is_err());
        assert!(parse(strings(&["--cpu-millicores=99999999"])).is_err());
        assert!(parse(strings(&["--gpu=1"])).is_err());
    }

    #[test]
    fn a_shared_demand_splits_over_live_replicas() {
        assert_eq!(per_replica(400, 4), 100);
        assert_eq!(per_replica(400, 0), 400);
        assert_eq!(thread_share(1500, 0), 1.0);
        assert_eq!(thread_share(1500, 1), 0.5);
        assert_eq!(thread_share(1500, 2), 0.0);
        let dir = std::env::temp_dir().join(format!("burner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("demand"), "300\n").expect("demand");
        assert_eq!(share_round(&dir, "a").expect("round"), (300, 1));
        assert_eq!(share_round(&dir, "b").expect("round"), (300, 2));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn spreads_millicores_over_whole_threads() {
        assert_eq!(shares(0), Vec::<f64>::new());
        assert_eq!(shares(250), vec![0.25]);
        assert_eq!(shares(2500), vec![1.0, 1.0, 0.5]);
    }
}
