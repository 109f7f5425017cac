//! memkv-rdma's modules form layers (see the crate documentation): every `crate::` path in a
//! module's code names a module listed below it in `LAYERS`, so no module imports one above
//! it and there are no cycles. Reads the sources; needs no RDMA.

use std::path::Path;

/// Bottom to top. A module may use any module before it in this list.
const LAYERS: &[&str] = &[
    // Bookkeeping, pure.
    "metrics_probe",
    "status",
    "chunks",
    "dc::unavailable",
    "error",
    "metrics_names",
    "op",
    "options",
    "slot",
    "window",
    "gate",
    "transfer",
    "endpoint",
    "inflight",
    "block",
    "dc::selector",
    // Verbs resources.
    "device",
    "memory",
    "lent",
    "staging",
    "remote_staging",
    "cq",
    "rc::verbs",
    "dc::ffi",
    "dc::handles",
    "dc::verbs",
    "dc::capability",
    "dc::choice",
    "dc::target",
    // Completion.
    "work_requests",
    "completion",
    "rc::pair",
    "dc::initiators",
    // Operations.
    "ops",
    "qp",
    "rc::ops",
    "dc::pool",
    "dc::ops",
];

/// Module files (not `lib.rs` or `mod.rs`, which only declare and re-export) and their paths.
fn modules(src: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let name = rel.to_str().unwrap().replace('/', "::");
            if name == "lib" || name.ends_with("mod") {
                continue;
            }
            found.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
    found
}

/// The modules `code` names through `crate::` paths, outside comments.
fn uses(code: &str) -> Vec<String> {
    let mut named = Vec::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap();
        for (at, _) in line.match_indices("crate::") {
            let path: String = line[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // The longest listed module the path starts with (`dc::verbs::RawQp` is in
            // `dc::verbs`); a crate-root re-export such as `crate::RdmaError` names none.
            let module = LAYERS
                .iter()
                .filter(|m| path == **m || path.starts_with(&format!("{m}::")))
                .max_by_key(|m| m.len());
            if let Some(m) = module {
                named.push((*m).to_owned());
            } else {
                assert!(
                    path.chars().next().is_some_and(char::is_uppercase),
                    "`crate::{path}` names a module missing from LAYERS"
                );
            }
        }
    }
    named
}

#[test]
fn no_module_uses_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut upward = Vec::new();
    let mut edges = 0;
    for (module, code) in modules(&src) {
        let own = rank(&module).unwrap_or_else(|| panic!("module {module} is not in LAYERS"));
        for used in uses(&code) {
            edges += 1;
            if used != module && rank(&used).unwrap() > own {
                upward.push(format!("{module} -> {used}"));
            }
        }
    }
    assert!(
        edges > 50,
        "only {edges} crate:: paths found: is the parser still right?"
    );
    assert!(
        upward.is_empty(),
        "modules using ones above them: {upward:#?}"
    );
}
