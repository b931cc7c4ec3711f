//! Where a bot's agent takes its login from ([`Login`], `GetLogin`): a variable of the bot's own
//! environment, one it inherits from botvisord, the CLI's credentials file, or nothing. Judged
//! from names and files only: no value of a variable is ever read past "set and not empty", nor
//! said (issue 46).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where a login comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A variable set (not empty) in the bot's own environment (`CreateBot`'s `env`,
    /// `SetEnvironment`).
    Environment(String),
    /// A variable set in botvisord's own environment, which the agent inherits.
    Botvisord(String),
    /// The CLI's credentials file, which exists (`claude /login`, `codex login`).
    File(PathBuf),
    /// The model provider the CLI's configuration names asks for no key (Codex: a
    /// `[model_providers.NAME]` without `env_key`).
    Provider(String),
    /// None of these: the agent's requests go without credentials and the bot waits in
    /// `login_required` at its first message.
    None,
}

/// Where a bot's agent takes its login from, and what was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    /// Where it comes from.
    pub source: Source,
    /// The variables that would log the agent in, in the order the CLI takes them.
    pub variables: Vec<String>,
    /// The credentials file looked for, when the CLI keeps one there.
    pub file: Option<PathBuf>,
    /// How the person logs the CLI in, in this runtime's terms (when there is no login).
    pub how: String,
}

impl Login {
    /// The first of `variables` set (not empty) in `env`, the agent's whole environment, as a
    /// [`Source`]: [`Source::Environment`] when `own` (the bot's own environment) has it, else
    /// [`Source::Botvisord`].
    pub fn variable(
        variables: &[&str],
        own: &BTreeMap<String, String>,
        env: &BTreeMap<String, String>,
    ) -> Option<Source> {
        let set = |name: &str| env.get(name).is_some_and(|v| !v.is_empty());
        variables.iter().find(|v| set(v)).map(|v| {
            if own.contains_key(*v) {
                Source::Environment((*v).to_owned())
            } else {
                Source::Botvisord((*v).to_owned())
            }
        })
    }

    /// Whether the agent has a login at all.
    pub fn found(&self) -> bool {
        self.source != Source::None
    }

    /// The source as `GetLogin`'s `source`: `environment`, `botvisord`, `file`, `provider` or
    /// `none`.
    pub fn source_name(&self) -> &'static str {
        match self.source {
            Source::Environment(_) => "environment",
            Source::Botvisord(_) => "botvisord",
            Source::File(_) => "file",
            Source::Provider(_) => "provider",
            Source::None => "none",
        }
    }

    /// In words, for a person: `ANTHROPIC_API_KEY in the bot's environment`, `logged in
    /// (/home/me/.claude/.credentials.json)`, `no login: …`.
    pub fn words(&self) -> String {
        match &self.source {
            Source::Environment(v) => format!("{v} in the bot's environment"),
            Source::Botvisord(v) => format!("{v} in botvisord's environment"),
            Source::File(f) => format!("logged in ({})", f.display()),
            Source::Provider(p) => {
                format!("the model provider {p} of its configuration asks for no key")
            }
            Source::None => {
                let file = self.file.as_ref().map(|f| format!("no {}", f.display()));
                let vars = match self.variables.as_slice() {
                    [] => None,
                    [one] => Some(format!("no {one}")),
                    [many @ .., last] => Some(format!("none of {} or {last}", many.join(", "))),
                }
                .map(|v| format!("{v} in the bot's environment or botvisord's"));
                let missing: Vec<String> = file.into_iter().chain(vars).collect();
                format!("no login: {}", missing.join(", and "))
            }
        }
    }

    /// `GetLogin`'s answer: `source`; `variable` (the variable that logs it in, for
    /// `environment` and `botvisord`), `file` (for `file`, and for `none` the file looked for),
    /// `provider` (for `provider`), `variables` and `how` (for `none`: the variables looked for,
    /// comma-separated, and how to log in, in the runtime's words), and `words`.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("source".to_owned(), self.source_name().to_owned());
        match &self.source {
            Source::Environment(v) | Source::Botvisord(v) => {
                m.insert("variable".to_owned(), v.clone());
            }
            Source::File(f) => {
                m.insert("file".to_owned(), f.display().to_string());
            }
            Source::Provider(p) => {
                m.insert("provider".to_owned(), p.clone());
            }
            Source::None => {
                if let Some(f) = &self.file {
                    m.insert("file".to_owned(), f.display().to_string());
                }
                m.insert("variables".to_owned(), self.variables.join(","));
                m.insert("how".to_owned(), self.how.clone());
            }
        }
        m.insert("words".to_owned(), self.words());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_variable_is_the_bots_own_or_botvisords_and_empty_is_unset() {
        let own = env(&[("A", "x"), ("B", "")]);
        let all = env(&[("A", "x"), ("B", ""), ("C", "y")]);
        assert_eq!(
            Login::variable(&["B", "A", "C"], &own, &all),
            Some(Source::Environment("A".into()))
        );
        assert_eq!(
            Login::variable(&["B", "C"], &own, &all),
            Some(Source::Botvisord("C".into()))
        );
        assert_eq!(Login::variable(&["B"], &own, &all), None);
    }

    #[test]
    fn claude_code_takes_a_key_before_its_credentials_file() {
        use crate::runtime::Runtime;
        let home = tempfile::tempdir().unwrap();
        let claude = crate::runtime::claude::Claude::new(None);
        let h = home.path().to_str().unwrap();
        let daemon = env(&[("HOME", h)]);
        assert_eq!(claude.login(&BTreeMap::new(), &daemon).source, Source::None);
        let own = env(&[("CLAUDE_CODE_OAUTH_TOKEN", "t")]);
        let both = env(&[("HOME", h), ("CLAUDE_CODE_OAUTH_TOKEN", "t")]);
        assert_eq!(
            claude.login(&own, &both).source,
            Source::Environment("CLAUDE_CODE_OAUTH_TOKEN".into())
        );
        std::fs::create_dir_all(home.path().join(".claude")).unwrap();
        let file = home.path().join(".claude/.credentials.json");
        std::fs::write(&file, "{}").unwrap();
        assert_eq!(
            claude.login(&BTreeMap::new(), &daemon).source,
            Source::File(file)
        );
        let keyed = env(&[("HOME", h), ("ANTHROPIC_API_KEY", "k")]);
        assert_eq!(
            claude.login(&BTreeMap::new(), &keyed).source,
            Source::Botvisord("ANTHROPIC_API_KEY".into())
        );
    }

    #[test]
    fn codex_takes_the_key_its_provider_names_or_its_own_login() {
        use crate::runtime::Runtime;
        let home = tempfile::tempdir().unwrap();
        let codex = crate::runtime::codex::Codex::new(None);
        let ch = home.path().to_str().unwrap();
        // The built-in provider: auth.json alone; OPENAI_API_KEY is not Codex's login.
        let daemon = env(&[("CODEX_HOME", ch), ("OPENAI_API_KEY", "k")]);
        let l = codex.login(&BTreeMap::new(), &daemon);
        assert_eq!(l.source, Source::None);
        assert_eq!(l.file, Some(home.path().join("auth.json")));
        std::fs::write(home.path().join("auth.json"), "{}").unwrap();
        assert_eq!(
            codex.login(&BTreeMap::new(), &daemon).source,
            Source::File(home.path().join("auth.json"))
        );
        // A provider with an env_key: that variable, the bot's own here.
        std::fs::write(
            home.path().join("config.toml"),
            "model_provider = \"fake\"\n[model_providers.fake]\nenv_key = \"FAKE_API_KEY\"\n",
        )
        .unwrap();
        let l = codex.login(&BTreeMap::new(), &daemon);
        assert_eq!(
            (l.source, l.variables),
            (Source::None, vec!["FAKE_API_KEY".to_owned()])
        );
        let own = env(&[("CODEX_HOME", ch), ("FAKE_API_KEY", "offline")]);
        assert_eq!(
            codex.login(&own, &own).source,
            Source::Environment("FAKE_API_KEY".into())
        );
    }

    #[test]
    fn none_says_what_was_looked_for_and_never_a_value() {
        let l = Login {
            source: Source::None,
            variables: vec!["K1".into(), "K2".into()],
            file: Some("/h/.claude/.credentials.json".into()),
            how: "run claude /login".into(),
        };
        let m = l.to_map();
        assert_eq!(m["source"], "none");
        assert_eq!(m["variables"], "K1,K2");
        assert_eq!(
            m["words"],
            "no login: no /h/.claude/.credentials.json, and none of K1 or K2 in the bot's \
             environment or botvisord's"
        );
        assert_eq!(m["how"], "run claude /login");
    }
}
