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

/// The structured seeds are valid inputs, so the fuzzer starts past the decoders and the
/// validation rather than having to discover a valid message first.
#[test]
fn structured_seeds_are_accepted() {
    use loadstar_proto::pb;
    use prost::Message;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let read = |t: &str, f: &str| std::fs::read(root.join(t).join(f)).expect("seed");

    let limits = loadstar_store::validate::ReportLimits::default();
    for f in ["minimal.pb", "full.pb"] {
        let r = pb::NodeReport::decode(read("node_report", f).as_slice()).expect("decodes");
        let v = loadstar_store::validate::validate(&r, &limits, r.sample_time_unix_nanos);
        assert!(v.is_ok(), "node_report/{f}: {v:?}");
    }
    for f in inputs(&root.join("profile_yaml")) {
        let text = std::fs::read_to_string(&f).expect("seed");
        let c = loadstar_policy::config::ScorerConfig::from_yaml(&text);
        assert!(c.is_ok(), "{}: {:?}", f.display(), c.err());
    }
    use loadstar_store::cluster::PodDecoder;
    for f in ["pod.json", "gpu-pod.json"] {
        let text = String::from_utf8(read("pod_json", f)).expect("utf-8");
        let p = loadstar_kube::convert::JsonPodDecoder.decode(&text);
        assert!(p.is_ok(), "pod_json/{f}: {p:?}");
    }
    for f in ["description.pb", "pod-json.pb", "gpu-pod-json.pb"] {
        let r = pb::ScoreRequest::decode(read("score_request", f).as_slice()).expect("decodes");
        let ok = match r.pod {
            Some(pb::score_request::Pod::Description(d)) => {
                loadstar_grpc::podspec::from_description(&d).is_ok()
            }
            Some(pb::score_request::Pod::PodJson(j)) => {
                loadstar_kube::convert::JsonPodDecoder.decode(&j).is_ok()
            }
            _ => false,
        };
        assert!(ok, "score_request/{f}");
    }
    for f in inputs(&root.join("extender")) {
        let args: Result<loadstar_extender::wire::ExtenderArgs, _> =
            serde_json::from_slice(&std::fs::read(&f).expect("seed"));
        let mut args = args.expect("ExtenderArgs");
        assert!(args.take_names().is_ok(), "{}", f.display());
        let pod = loadstar_kube::convert::JsonPodDecoder.decode(&args.pod.to_string());
        assert!(pod.is_ok(), "{}: {pod:?}", f.display());
    }
}
