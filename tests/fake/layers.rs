//! The module graph has no circle where the design says one layer sits below another (issue
//! 48): the configuration is read by the supervisor, the daemon and the D-Bus layer, and names
//! none of them. (The core's own boundary is `supervisor::core`'s `the_core_names_no_shell`.)

use std::path::PathBuf;

/// The code lines (comments left out) of `src/<file>` and of the files below `src/<dir>`.
fn code_of(file: &str, dir: &str) -> Vec<(String, usize, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![root.join(file)];
    for entry in std::fs::read_dir(root.join(dir)).unwrap() {
        files.push(entry.unwrap().path());
    }
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.strip_prefix(&root).unwrap().display().to_string();
        for (n, line) in text.lines().enumerate() {
            if !line.trim_start().starts_with("//") {
                out.push((name.clone(), n + 1, line.to_owned()));
            }
        }
    }
    out
}

#[test]
fn the_configuration_names_no_layer_above_it() {
    let above = [
        "crate::supervisor",
        "crate::dbus",
        "crate::daemon",
        "crate::systemd",
    ];
    let found: Vec<_> = code_of("config.rs", "config")
        .into_iter()
        .filter(|(_, _, line)| above.iter().any(|a| line.contains(a)))
        .map(|(file, n, line)| format!("src/{file}:{n}: {}", line.trim()))
        .collect();
    assert!(
        found.is_empty(),
        "the configuration names a layer above it:\n{}",
        found.join("\n")
    );
}
