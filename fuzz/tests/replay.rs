//! Replays the committed seed corpus (`corpus/<target>/`) and any recorded crash inputs
//! (`crashes/<target>/`) through every target with plain `cargo test`, no AFL needed: the
//! corpus must pass, and a recorded crash is reported until the bug behind it is fixed
//! (set `LOADSTAR_FUZZ_EXPECT_CRASHES=1` to only list them).
use std::path::Path;

fn inputs(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(".md"))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn corpus_passes_every_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, f) in loadstar_fuzz::TARGETS {
        let files = inputs(&root.join("corpus").join(name));
        assert!(!files.is_empty(), "corpus/{name} is empty");
        for p in files {
            let data = std::fs::read(&p).expect("read corpus file");
            let r = std::panic::catch_unwind(|| f(&data));
            assert!(r.is_ok(), "{name}: {} panicked", p.display());
        }
    }
}

#[test]
fn recorded_crashes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let only_list = std::env::var_os("LOADSTAR_FUZZ_EXPECT_CRASHES").is_some();
    let mut still = Vec::new();
    for (name, f) in loadstar_fuzz::TARGETS {
        for p in inputs(&root.join("crashes").join(name)) {
            let data = std::fs::read(&p).expect("read crash file");
            if std::panic::catch_unwind(|| f(&data)).is_err() {
                still.push(format!("{name}: {}", p.display()));
            }
        }
    }
    if !only_list {
        assert!(
            still.is_empty(),
            "recorded crashes still reproduce:\n{}",
            still.join("\n")
        );
    }
}
