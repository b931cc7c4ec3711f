//! Runs the loopback stand-in for the Anthropic Messages API that the tests use, so that Claude
//! Code can answer offline. It echoes what it is told; `write /abs/path: some text` makes the
//! model ask to write that file (a permission prompt). Prints the URL for `ANTHROPIC_BASE_URL`.
//!
//! `cargo run --example stand_in_api [PORT]` (default: a free port); with options
//! (`cargo run --example stand_in_api -- --help`): `--limit-for SECONDS` (a plan's usage limit,
//! which Claude Code reads with an OAuth login only: `CLAUDE_CODE_OAUTH_TOKEN`),
//! `--expired-login`, `--slow MS`, `--log FILE` (support::stand_ins::Behaviour).

use clap::Parser;
use support::{stand_in_api, stand_ins};

#[tokio::main]
async fn main() {
    let args = stand_ins::ApiArgs::parse();
    let port = args.port.unwrap_or(0);
    let decider = match stand_ins::Decider::new(args.behaviour.clone()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("stand_in_api: cannot write the log: {e}");
            std::process::exit(1);
        }
    };
    let script = stand_ins::claude_script(decider, stand_in_api::demo_script());
    let api = match stand_in_api::StandInApi::try_start_on(port, script).await {
        Ok(api) => api,
        Err(e) => {
            eprintln!("stand_in_api: cannot listen on 127.0.0.1:{port}: {e} (try another port)");
            std::process::exit(1);
        }
    };
    println!("{}", api.url);
    eprintln!("stand-in Messages API listening; Ctrl-C to stop");
    let _ = tokio::signal::ctrl_c().await;
}
