//! AFL entry point of the `quantity` target; the body and its properties are in `src/quantity.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::quantity::fuzz(data));
}
