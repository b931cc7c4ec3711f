//! What botvisor reads of `$CODEX_HOME/config.toml`: the defaults Codex itself falls back to when
//! a bot names none (its `model`, its `sandbox_mode`).

use std::path::Path;

/// The string value of `key` at the top of `codex_home`'s `config.toml`, if the file is there,
/// parses as TOML and has it.
pub fn value(codex_home: Option<&Path>, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(codex_home?.join("config.toml")).ok()?;
    let table = text.parse::<toml::Table>().ok()?;
    table.get(key)?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_top_level_string_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            "model = \"m\"\n[model_providers.x]\nname = \"y\"\n",
        )
        .unwrap();
        assert_eq!(value(Some(dir.path()), "model").as_deref(), Some("m"));
        assert_eq!(value(Some(dir.path()), "name"), None);
        assert_eq!(value(None, "model"), None);
    }

    #[test]
    fn a_missing_or_broken_file_gives_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(value(Some(dir.path()), "model"), None);
        std::fs::write(dir.path().join("config.toml"), "model = \n").unwrap();
        assert_eq!(value(Some(dir.path()), "model"), None);
    }
}
