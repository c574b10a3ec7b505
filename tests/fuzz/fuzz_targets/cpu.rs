//! AFL entry point of the `cpu` target; the body and its properties are in `src/cpu.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::cpu::fuzz(data));
}
