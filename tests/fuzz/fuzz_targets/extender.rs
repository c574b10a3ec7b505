//! AFL entry point of the `extender` target; the body and its properties are in `src/extender.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::extender::fuzz(data));
}
