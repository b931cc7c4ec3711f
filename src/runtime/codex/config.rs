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

/// How the model provider of a `config.toml` takes its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderKey {
    /// Codex's own login, `$CODEX_HOME/auth.json` (`codex login`): the built-in `openai`
    /// provider, or one with `requires_openai_auth = true`. Codex 0.171.0's app-server does not
    /// read `OPENAI_API_KEY` from its environment for it (seen: its requests went without
    /// `Authorization`).
    CodexLogin,
    /// The variable its `env_key` names, sent as `Authorization: Bearer …`.
    Variable(String),
    /// None: a provider without `env_key` (a local model server).
    None,
}

/// The model provider `codex_home`'s `config.toml` names (`model_provider`, default `openai`)
/// and how it takes its key (its `[model_providers.NAME]` table).
pub fn provider_key(codex_home: Option<&Path>) -> (String, ProviderKey) {
    let table = codex_home
        .and_then(|h| std::fs::read_to_string(h.join("config.toml")).ok())
        .and_then(|text| text.parse::<toml::Table>().ok())
        .unwrap_or_default();
    let name = table
        .get("model_provider")
        .and_then(toml::Value::as_str)
        .unwrap_or("openai")
        .to_owned();
    let provider = table
        .get("model_providers")
        .and_then(|p| p.get(&name))
        .and_then(toml::Value::as_table);
    let key = match provider {
        Some(p) if p.get("requires_openai_auth").and_then(toml::Value::as_bool) == Some(true) => {
            ProviderKey::CodexLogin
        }
        Some(p) => match p.get("env_key").and_then(toml::Value::as_str) {
            Some(v) if !v.is_empty() => ProviderKey::Variable(v.to_owned()),
            _ => ProviderKey::None,
        },
        None if name == "openai" => ProviderKey::CodexLogin,
        // Codex's other built-in providers are local model servers (`oss`, `ollama`, …).
        None => ProviderKey::None,
    };
    (name, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_says_where_its_key_comes_from() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            provider_key(Some(dir.path())),
            ("openai".to_owned(), ProviderKey::CodexLogin)
        );
        let write = |text: &str| std::fs::write(dir.path().join("config.toml"), text).unwrap();
        write("model_provider = \"fake\"\n[model_providers.fake]\nenv_key = \"FAKE_API_KEY\"\n");
        assert_eq!(
            provider_key(Some(dir.path())),
            (
                "fake".to_owned(),
                ProviderKey::Variable("FAKE_API_KEY".into())
            )
        );
        write("model_provider = \"local\"\n[model_providers.local]\nname = \"l\"\n");
        assert_eq!(provider_key(Some(dir.path())).1, ProviderKey::None);
        write("model_provider = \"p\"\n[model_providers.p]\nrequires_openai_auth = true\n");
        assert_eq!(provider_key(Some(dir.path())).1, ProviderKey::CodexLogin);
        write("model_provider = \"oss\"\n");
        assert_eq!(provider_key(Some(dir.path())).1, ProviderKey::None);
    }

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
