//! The CPU time a process has used, read from the text of its `/proc/<pid>/stat`: one parser
//! for the scorer's backpressure and every benchmark tool that accounts a process's CPU (the
//! callers read the file; this module does no I/O).

/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks: 100 per second on every Linux
/// architecture Loadstar ships for (`sysconf(_SC_CLK_TCK)`, fixed by the kernel ABI).
pub const USER_HZ: f64 = 100.0;

/// User + system CPU ticks from the text of `/proc/<pid>/stat`. Fields are counted after the
/// command name's closing parenthesis (the name itself may hold spaces and parentheses):
/// utime and stime are fields 14 and 15.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

/// [`cpu_ticks`] in seconds.
pub fn cpu_seconds(stat: &str) -> Option<f64> {
    cpu_ticks(stat).map(|t| t as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_after_the_command_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime …; the name may hold spaces and parentheses.
        let stat = "4242 (loadstar (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(cpu_seconds("4242 (x) S 1"), None);
        assert_eq!(cpu_seconds("garbage"), None);
        assert_eq!(cpu_seconds("1 (x) S 1 1 1 0 -1 0 0 0 0 0 -5 1"), None);
    }
}
