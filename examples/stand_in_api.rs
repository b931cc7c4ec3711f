//! Runs the loopback stand-in for the Anthropic Messages API that the tests use, so that Claude
//! Code can answer offline. It echoes what it is told; `write /abs/path: some text` makes the
//! model ask to write that file (a permission prompt). Prints the URL for `ANTHROPIC_BASE_URL`.
//!
//! `cargo run --example stand_in_api [PORT]` (default: a free port).

use support::stand_in_api;

#[tokio::main]
async fn main() {
    let port: u16 = std::env::args()
        .nth(1)
        .map(|p| p.parse().expect("PORT must be a number"))
        .unwrap_or(0);
    let api = match stand_in_api::StandInApi::try_start_on(port, stand_in_api::demo_script()).await
    {
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
