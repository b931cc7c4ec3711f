#[test]
fn a_message_about_a_huge_line_is_cut() {
    let line = format!("x = \"{}", "a".repeat(5_000_000));
    let e = super::Config::from_toml(&line, std::path::Path::new("c.toml")).unwrap_err();
    let text = e.to_string();
    assert!(text.chars().count() < 2200, "{}", text.len());
    assert!(text.contains("(cut at 2000 characters)"), "{text}");
}
use super::*;

#[test]
fn empty_file_gives_defaults() {
    let c = Config::from_toml("", Path::new("x.toml")).unwrap();
    assert_eq!(c, Config::default());
}

#[test]
fn unknown_key_names_key_and_line() {
    let err = Config::from_toml(
        "stop_grace_s = 2\nclaude_binn = \"x\"\n",
        Path::new("c.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("claude_binn"), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn an_unknown_key_says_what_it_may_be_a_typo_of() {
    let err = Config::from_toml(
        "stop_grace_s = 2\nclaude_binn = \"x\"\n",
        Path::new("c.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("line 2: unknown key `claude_binn`; did you mean `claude_bin`?"),
        "{err}"
    );
    let err = Config::from_toml("[notify]\nstaets = []\n", Path::new("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean `states`?"), "{err}");
    let err = Config::from_toml("zzzzzz = 1\n", Path::new("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("the keys here: claude_bin, "), "{err}");
}

#[test]
fn a_default_model_that_is_no_model_name_and_a_database_in_the_kernels_files_are_refused() {
    for bad in [
        r#""--dangerously-skip-permissions""#,
        r#""two words""#,
        r#""x\u001b""#,
    ] {
        let text = format!("default_model = {bad}");
        let err = Config::from_toml(&text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("key `default_model`") && err.contains("not a model name"),
            "{err}"
        );
    }
    assert!(Config::from_toml("default_model = \"sonnet\"", Path::new("c.toml")).is_ok());
    for bad in ["/proc/botvisor.db", "/sys/x.db", "/tmp/../proc/self/x.db"] {
        let text = format!("database = {bad:?}");
        let err = Config::from_toml(&text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("key `database`") && err.contains("file system of the kernel"),
            "{err}"
        );
    }
    assert!(Config::from_toml("database = \"/tmp/procx/x.db\"", Path::new("c.toml")).is_ok());
}

#[test]
fn wrong_type_is_an_error() {
    let err = Config::from_toml("idle_timeout_s = \"soon\"", Path::new("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("idle_timeout_s"), "{err}");
}

#[test]
fn wrong_types_are_explained_in_words() {
    for (text, want) in [
        (
            "stop_grace_s = 2\nidle_timeout_s = \"soon\"",
            "line 2: key `idle_timeout_s` takes a whole number of seconds (0 or more, no \
             quotes); found the text \"soon\"",
        ),
        (
            "stop_grace_s = \"5\"",
            "key `stop_grace_s` takes a number of seconds (for example 5 or 2.5, no quotes); \
             found the text \"5\"",
        ),
        ("claude_bin = 3", "key `claude_bin` takes a path in quotes"),
        ("env_allowlist = \"PATH\"", "takes a list in brackets"),
        ("crash_loop_limit = -1", "found the whole number -1"),
    ] {
        let err = Config::from_toml(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{text}: {err}");
        assert!(!err.contains("expected"), "{text}: {err}");
    }
}

#[test]
fn durations_out_of_range_are_errors() {
    for text in [
        "stop_grace_s = 1e20",
        "stop_grace_s = -1",
        "fresh_start_if_dies_within_s = 1e30",
        "idle_timeout_s = 18446744073709551615",
    ] {
        let err = Config::from_toml(text, Path::new("c.toml"));
        assert!(err.is_err(), "{text} was accepted");
    }
}

#[test]
fn memory_max_is_bytes_of_at_least_one_mib() {
    let c = Config::from_toml("memory_max = 2147483648", Path::new("c.toml")).unwrap();
    assert_eq!(c.memory_max, Some(2 << 30));
    assert_eq!(Config::default().memory_max, None);
    let err = Config::from_toml("memory_max = 4096", Path::new("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("key `memory_max`") && err.contains("1 MiB"),
        "{err}"
    );
}

#[test]
fn allowlist_prefixes() {
    let c = Config::default();
    assert!(c.env_allowed("LC_TIME"));
    assert!(c.env_allowed("PATH"));
    assert!(!c.env_allowed("DBUS_SESSION_BUS_ADDRESS"));
    assert!(!c.env_allowed("PATHX"));
}

#[test]
fn a_symlink_to_the_database_names_the_same_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("botvisor.db");
    std::fs::write(&db, b"").unwrap();
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&db, &link).unwrap();
    assert_eq!(paths::lock_file(&link), paths::lock_file(&db));
}

#[test]
fn a_hard_link_to_the_database_names_the_same_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("botvisor.db");
    std::fs::write(&db, b"").unwrap();
    std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
    let link = dir.path().join("elsewhere/other.db");
    std::fs::hard_link(&db, &link).unwrap();
    assert_eq!(paths::lock_file(&link), paths::lock_file(&db));
    let new = dir.path().join("not-yet.db");
    assert_ne!(paths::lock_file(&new), paths::lock_file(&db));
}

#[test]
fn issue_31_memory_pressure_keys_are_checked_with_words() {
    let c = Config::from_toml(
        "stop_idle_on_memory_pressure = false\nmemory_pressure_stall_ms = 400\n\
         memory_pressure_window_s = 4\nmemory_pressure_file = \"/proc/pressure/memory\"\n",
        Path::new("c.toml"),
    )
    .unwrap();
    assert!(!c.stop_idle_on_memory_pressure);
    assert_eq!(c.memory_pressure_trigger().line(), "some 400000 4000000\n");
    let d = Config::default();
    assert!(d.stop_idle_on_memory_pressure, "on by default");
    assert_eq!(d.memory_pressure_trigger().line(), "some 150000 2000000\n");
    for (text, says) in [
        ("memory_pressure_window_s = 3", "must be 2, 4, 6, 8 or 10"),
        ("memory_pressure_window_s = 12", "got 12"),
        ("memory_pressure_window_s = 0", "got 0"),
        ("memory_pressure_stall_ms = 0", "must be from 1 to 2000"),
        (
            "memory_pressure_window_s = 4\nmemory_pressure_stall_ms = 4001",
            "must be from 1 to 4000",
        ),
        (
            "memory_pressure_file = \"pressure\"",
            "must be an absolute path",
        ),
        (
            "stop_idle_on_memory_pressure = \"no\"",
            "key `stop_idle_on_memory_pressure` takes true or false",
        ),
    ] {
        let err = Config::from_toml(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{text}: {err}");
    }
}
