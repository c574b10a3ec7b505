//! AFL entry point of the `net_dev` target; the body and its properties are in `src/net_dev.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::net_dev::fuzz(data));
}
