//! The module graph has no circle where the design says one layer sits below another (issue
//! 48): the configuration is read by the supervisor, the daemon and the D-Bus layer, and names
//! none of them; the store and the runtimes sit below the supervisor; the D-Bus objects sit
//! below the service that serves them. (The core's own boundary is `supervisor::core`'s
//! `the_core_names_no_shell`.)

use std::path::PathBuf;

/// The code lines (comments left out) of `src/<file>` and of the files below `src/<dir>`, at any
/// depth; a `file` that does not exist is left out.
fn code_of(file: &str, dir: &str) -> Vec<(String, usize, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<PathBuf> = vec![root.join(file)]
        .into_iter()
        .filter(|f| f.is_file())
        .collect();
    let mut dirs = vec![root.join(dir)];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
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

/// The layers above the configuration, the store and the runtimes.
const ABOVE: [&str; 4] = [
    "crate::supervisor",
    "crate::dbus",
    "crate::daemon",
    "crate::systemd",
];

/// Every line of `code` that names one of `above`, as `src/FILE:LINE: text`.
fn naming(code: Vec<(String, usize, String)>, above: &[&str]) -> Vec<String> {
    code.into_iter()
        .filter(|(_, _, line)| above.iter().any(|a| line.contains(a)))
        .map(|(file, n, line)| format!("src/{file}:{n}: {}", line.trim()))
        .collect()
}

#[test]
fn the_configuration_names_no_layer_above_it() {
    let found = naming(code_of("config.rs", "config"), &ABOVE);
    assert!(
        found.is_empty(),
        "the configuration names a layer above it:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_store_and_the_runtimes_name_no_supervisor() {
    // A queued message is one type from the store to the agent, `crate::queued::QueuedTurn`,
    // below both.
    let mut code = code_of("store.rs", "store");
    code.extend(code_of("runtime.rs", "runtime"));
    let found = naming(code, &ABOVE);
    assert!(
        found.is_empty(),
        "the store or a runtime names a layer above it:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_d_bus_objects_name_the_service_that_serves_them_nowhere() {
    // What every object shares is `dbus::ctx::Ctx`; the service makes it and serves the objects,
    // so an object that named the service would close a circle.
    let objects = code_of("", "dbus")
        .into_iter()
        .filter(|(file, _, _)| file != "dbus/service.rs" && file != "dbus/mod.rs")
        .collect();
    let found = naming(objects, &["super::service", "dbus::service"]);
    assert!(
        found.is_empty(),
        "a D-Bus object names the service:\n{}",
        found.join("\n")
    );
}
