//! AFL entry point of the `score_request` target; the body and its properties are in `src/score_request.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::score_request::fuzz(data));
}
