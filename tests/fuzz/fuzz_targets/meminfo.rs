//! AFL entry point of the `meminfo` target; the body and its properties are in `src/meminfo.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::meminfo::fuzz(data));
}
