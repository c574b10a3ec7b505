//! AFL entry point of the `node_report` target; the body and its properties are in `src/node_report.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::node_report::fuzz(data));
}
