//! AFL entry point of the `cgroup` target; the body and its properties are in `src/cgroup.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::cgroup::fuzz(data));
}
