//! AFL entry point of the `sampler_values` target; the body and its properties are in `src/sampler_values.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::sampler_values::fuzz(data));
}
