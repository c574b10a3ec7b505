//! AFL entry point of the `diskstats` target; the body and its properties are in `src/diskstats.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::diskstats::fuzz(data));
}
