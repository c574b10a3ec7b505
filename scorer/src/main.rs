//! `loadstar-scorer` binary entry point.
fn main() {
    println!("loadstar-scorer {}", loadstar_common::VERSION);
}
