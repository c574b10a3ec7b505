//! `loadstar-scorer` binary entry point (modes are being wired in).
fn main() {
    println!("loadstar-scorer {}", loadstar_common::VERSION);
}
