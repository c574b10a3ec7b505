//! AFL entry point of the `profile_yaml` target; the body and its properties are in `src/profile_yaml.rs`.
fn main() {
    afl::fuzz!(|data: &[u8]| loadstar_fuzz::profile_yaml::fuzz(data));
}
