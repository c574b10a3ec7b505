//! `loadstar-burner`: the workload of the end-to-end suite's pods on a real node — burns a
//! given number of millicores and holds a given amount of resident memory until killed, so
//! that the agent's per-pod readings can be checked against the container's own cgroup.
//!
//! Usage: `loadstar-burner [--cpu-millicores N] [--memory-mib M] [--seconds S]`
//! (defaults 500, 0, forever). Only the standard library: the image stays a static-free,
//! dependency-free copy on the minimal base. As PID 1 in a container it has no SIGTERM
//! handler, so pods running it should set a short `terminationGracePeriodSeconds`.
use std::time::{Duration, Instant};

/// Each burning thread works for its share of this period and sleeps the rest.
const PERIOD: Duration = Duration::from_millis(100);
const PAGE: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
struct Args {
    cpu_millicores: u64,
    memory_mib: u64,
    seconds: Option<u64>,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        cpu_millicores: 500,
        memory_mib: 0,
        seconds: None,
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
    for share in shares(args.cpu_millicores) {
        std::thread::spawn(move || burn(share));
    }
    eprintln!(
        "loadstar-burner: {} millicores, {} MiB",
        args.cpu_millicores, args.memory_mib
    );
    let start = Instant::now();
    let mut round: u8 = 0;
    loop {
        // Touch every page so the memory stays resident (and counted by the cgroup).
        round = round.wrapping_add(1);
        for page in memory.chunks_mut(PAGE) {
            page[0] = round;
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
                seconds: None
            }
        );
        assert!(parse(strings(&["--cpu-millicores", "lots"])).is_err());
        assert!(parse(strings(&["--memory-mib"])).is_err());
        assert!(parse(strings(&["--cpu-millicores=99999999"])).is_err());
        assert!(parse(strings(&["--gpu=1"])).is_err());
    }

    #[test]
    fn spreads_millicores_over_whole_threads() {
        assert_eq!(shares(0), Vec::<f64>::new());
        assert_eq!(shares(250), vec![0.25]);
        assert_eq!(shares(2500), vec![1.0, 1.0, 0.5]);
    }
}
