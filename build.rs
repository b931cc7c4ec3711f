//! Marks the real-CLI tests ignored, with the reason, when their CLI is not configured: `cargo
//! test` then names each one `ignored, BOTVISOR_TEST_CLAUDE_BIN not set: …` and counts them in its
//! summary, instead of a pass that tested nothing. With `BOTVISOR_TEST_REQUIRE_CLAUDE` (or
//! `…_CODEX`) set, as CI sets it, they run and fail without their CLI.

fn main() {
    for (cli, cfg) in [
        ("CLAUDE", "botvisor_skip_claude"),
        ("CODEX", "botvisor_skip_codex"),
    ] {
        let bin = format!("BOTVISOR_TEST_{cli}_BIN");
        let require = format!("BOTVISOR_TEST_REQUIRE_{cli}");
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        println!("cargo::rerun-if-env-changed={require}");
        let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
        if set(&require) {
            // Required (CI): the binary's path may change between runs without a rebuild.
            continue;
        }
        println!("cargo::rerun-if-env-changed={bin}");
        if !set(&bin) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}
