//! Runs the loopback stand-in for the OpenAI Responses API that the tests use, so that Codex can
//! answer offline, and writes a `CODEX_HOME` whose `config.toml` points Codex at it (a custom
//! `model_provider`; Codex 0.171.0 ignores `OPENAI_BASE_URL`). It echoes what it is told;
//! `run: CMD` makes the model run a shell command, `run escalated: CMD` makes it ask first (a
//! permission prompt with a policy `on-request`).
//!
//! `cargo run --example stand_in_responses [DIR]` (default `./stand-in-codex`): prints the
//! `CODEX_HOME` to give a Codex bot (`DIR/codex-home`) with the API key variable it needs. With
//! options (`cargo run --example stand_in_responses -- --help`): `--limit-for SECONDS`,
//! `--expired-login`, `--slow MS`, `--log FILE` (support::stand_ins::Behaviour).

use clap::Parser;
use support::{responses_api, stand_ins};

#[tokio::main]
async fn main() {
    let args = stand_ins::ResponsesArgs::parse();
    let dir = args.dir;
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("stand_in_responses: cannot create {}: {e}", dir.display());
        std::process::exit(1);
    }
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let decider = match stand_ins::Decider::new(args.behaviour.clone()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("stand_in_responses: cannot write the log: {e}");
            std::process::exit(1);
        }
    };
    let script = stand_ins::codex_script(decider, responses_api::shell_script());
    let api = responses_api::ResponsesApi::start(script).await;
    let home = responses_api::codex_home(&dir, &api.base_url, "");
    println!("CODEX_HOME={}", home.display());
    println!("FAKE_API_KEY=offline");
    eprintln!(
        "stand-in Responses API at {}; give a Codex bot the two variables above in its env; \
         Ctrl-C to stop",
        api.base_url
    );
    let _ = tokio::signal::ctrl_c().await;
}
