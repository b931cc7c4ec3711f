//! Issue 29's guard rails that botvisord itself enforces, whoever calls (an agent could call
//! D-Bus directly, without `botvisorctl mcp`): who created a bot (`CreatedBy`, `CreatedByBot`),
//! the depth and count limits on bots created by bots, and no bot answering its own permission
//! requests. A bot's process is played by `botvisorctl` started with the bot's marker
//! (`BOTVISOR_BOT_ID`), as every descendant of a bot's agent carries it.

use std::collections::HashMap;
use std::process::Stdio;

use serde_json::{Value, json};
use zbus::Variant;

use support::*;

const CTL: &str = env!("CARGO_BIN_EXE_botvisorctl");

/// Runs botvisorctl on `bus` as a process of bot `marker` (if any): (exit code, stdout, stderr).
async fn ctl_as(bus: &str, marker: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut c = tokio::process::Command::new(CTL);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .args(args);
    if let Some(m) = marker {
        c.env("BOTVISOR_BOT_ID", m);
    }
    let out = bounded("botvisorctl", c.output()).await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A bot that a process of bot `marker` creates with `botvisorctl create`; its id, or the
/// failure's words.
async fn create_as(s: &FakeSetup, marker: &str) -> Result<String, String> {
    let work = s.env.work.to_str().unwrap();
    let (code, out, err) = ctl_as(
        &s.env.bus.address,
        Some(marker),
        &["--json", "create", "--cwd", work],
    )
    .await;
    if code != 0 {
        return Err(err);
    }
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    Ok(v["id"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_created_by_bots_are_recorded_and_limited_in_depth_and_count() {
    let s = FakeSetup::start("agent_max_depth = 1\nagent_max_bots = 1\n").await;
    let manager = s.env.manager().await;
    // A person's program names itself; no bot called.
    let work = s.env.work.to_str().unwrap();
    let mut o: HashMap<&str, Variant<'_>> = HashMap::new();
    o.insert("cwd", Variant::from(work));
    o.insert("created_by", Variant::from("a test"));
    let a = s.env.bot(&manager.create_bot(o).await.unwrap()).await;
    assert_eq!(a.created_by().await.unwrap(), "a test");
    assert_eq!(a.created_by_bot().await.unwrap(), "");
    let a_id = a.id().await.unwrap();

    // A process of bot A creates B: botvisord reads A from the caller's process.
    let b_id = create_as(&s, &a_id).await.expect("A creates B");
    let b = s.env.bot(&manager.get_bot(&b_id).await.unwrap()).await;
    assert_eq!(b.created_by_bot().await.unwrap(), a_id);

    // B is 1 deep: a bot B creates would be 2, over agent_max_depth = 1.
    let err = create_as(&s, &b_id).await.expect_err("B may not create");
    assert!(
        err.contains("LimitExceeded") || err.contains("agent_max_depth"),
        "{err}"
    );
    assert!(err.contains("agent_max_depth"), "{err}");
    // One bot created by a bot exists: agent_max_bots = 1 refuses A a second.
    let err = create_as(&s, &a_id)
        .await
        .expect_err("A may not create a second");
    assert!(err.contains("agent_max_bots"), "{err}");
    // Nothing was created by the refusals.
    assert_eq!(manager.list_bots().await.unwrap().len(), 2);

    // A client's name with a control character is refused by name.
    let mut o: HashMap<&str, Variant<'_>> = HashMap::new();
    o.insert("cwd", Variant::from(work));
    o.insert("created_by", Variant::from("evil\u{1b}[2J"));
    let e = manager.create_bot(o).await.unwrap_err();
    assert!(e.to_string().contains("created_by"), "{e}");
    assert_eq!(manager.list_bots().await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_cannot_answer_its_own_permission_request() {
    let s = FakeSetup::start("").await;
    let bot = s
        .bot(json!([{"mode": "normal", "ask": {"tool": "Write", "input_bytes": 10}}]))
        .await;
    let id = bot.id().await.unwrap();
    let mut asked = bot.receive_permission_requested().await.unwrap();
    let mut finished = bot.receive_turn_finished().await.unwrap();
    let turn = bot.send("write it", HashMap::new()).await.unwrap();
    let request = bounded("PermissionRequested", async {
        use futures_util::StreamExt;
        asked
            .next()
            .await
            .unwrap()
            .args()
            .unwrap()
            .request_id
            .clone()
    })
    .await;

    // A process carrying the bot's own marker is refused, and the request stays open.
    let bus = s.env.bus.address.clone();
    let (code, _, err) = ctl_as(&bus, Some(&id), &["answer", &id, &request, "allow"]).await;
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("cannot answer its own permission requests"),
        "{err}"
    );
    let open = s
        .env
        .bot_uncached(&bot.inner().path().to_owned().into())
        .await;
    assert_eq!(open.pending_permissions().await.unwrap().len(), 1);

    // Another bot's process (or a person) may answer it.
    let (code, _, err) = ctl_as(
        &bus,
        Some("0123456789abcdef0123456789abcdef"),
        &["answer", &id, &request, "allow"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let done = wait_turns(&mut finished, std::slice::from_ref(&turn)).await;
    assert_eq!(done[0].1, "success");
}
