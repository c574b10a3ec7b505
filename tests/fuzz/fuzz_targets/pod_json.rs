//! AFL entry point of the `pod_json` target; the body and its properties are in `src/pod_json.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::pod_json::fuzz(data));
}
