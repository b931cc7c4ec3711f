use super::*;

fn wal_size(db: &Path) -> u64 {
    std::fs::metadata(db.with_extension("db-wal"))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// Our own checkpoint never makes a client's write fail: a quiet-time TRUNCATE of a big WAL
/// takes longer than a client call waits ([`fault::CLIENT_BUSY_WAIT`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_write_during_our_own_checkpoint_does_not_fail() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = Store::open(&db).unwrap();
    let rec = BotRecord::new("b", "b", "/", "claude");
    store.tx(|tx| bots::insert(tx, &rec)).unwrap();
    let big = format!("{{\"t\":\"{}\"}}", "x".repeat(1 << 20));
    for _ in 0..2 {
        for _ in 0..100 {
            store
                .tx(|tx| chat::append(tx, "b", "assistant", None, &big))
                .unwrap();
        }
        // The first client write after a quiet moment meets the TRUNCATE checkpoint it
        // started (a client comes when it comes: no event to wait for).
        std::thread::sleep(QUIET + std::time::Duration::from_millis(30));
        let mut failures = Vec::new();
        if let Err(e) = store.tx_now(|tx| bots::set_last_error(tx, "b", "")) {
            failures.push(e.to_string());
        }
        assert!(failures.is_empty(), "{failures:?}");
    }
    assert!(
        wal_size(&db) < 1 << 20,
        "the WAL was checkpointed: {}",
        wal_size(&db)
    );
}

#[test]
fn a_commit_is_not_lost_to_another_writer_on_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = Store::open(&db).unwrap();
    let rec = BotRecord::new("b", "b", "/", "claude");
    store.tx(|tx| bots::insert(tx, &rec)).unwrap();
    // Another connection (the checkpoint thread has one) writes while our transaction runs,
    // after our transaction has read: a deferred transaction would then fail with
    // SQLITE_BUSY and lose the item; an immediate one holds the write lock from the start.
    let other = Connection::open(&db).unwrap();
    other.busy_timeout(std::time::Duration::ZERO).unwrap();
    let mut other_wrote = None;
    let item = store
        .tx(|tx| {
            let n: i64 = tx.query_row("SELECT COUNT(*) FROM chat_items", [], |r| r.get(0))?;
            other_wrote = Some(
                other
                    .execute("UPDATE bots SET name = 'x' WHERE id = 'b'", [])
                    .is_ok(),
            );
            chat::append(tx, "b", "assistant", None, &format!("{{\"n\":{n}}}"))
        })
        .expect("the commit went through");
    assert_eq!(item.seq, 1);
    assert_eq!(other_wrote, Some(false), "the other writer had to wait");
}

#[test]
fn the_wal_is_checkpointed_off_the_commit_path() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = Store::open(&db).unwrap();
    let rec = BotRecord::new("b", "b", "/", "claude");
    store.tx(|tx| bots::insert(tx, &rec)).unwrap();
    let payload = format!("{{\"text\":\"{}\"}}", "x".repeat(3000));
    for _ in 0..(2 * CHECKPOINT_EVERY) {
        store
            .tx(|tx| chat::append(tx, "b", "assistant", None, &payload))
            .unwrap();
    }
    assert!(wal_size(&db) > 1024 * 1024, "a burst fills the WAL");
    // Quiet: the WAL is checkpointed and truncated, by the store's own thread.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while wal_size(&db) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        wal_size(&db),
        0,
        "the WAL was not truncated after the burst"
    );
    let count: i64 = store
        .read(|c| c.query_row("SELECT COUNT(*) FROM chat_items", [], |r| r.get(0)))
        .unwrap();
    assert_eq!(count, 2 * CHECKPOINT_EVERY as i64);
}

/// Issue 47: a commit that makes a promise to a client syncs the WAL (`synchronous = FULL`
/// while it commits); every other commit, before and after it, stays on NORMAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promise_commits_with_full_sync_and_nothing_else_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("t.db")).unwrap();
    let sync = |tx: &rusqlite::Transaction<'_>| -> rusqlite::Result<i64> {
        tx.pragma_query_value(None, "synchronous", |r| r.get(0))
    };
    let (normal, full) = (1, 2);
    assert_eq!(store.tx(|tx| sync(tx)).unwrap(), normal);
    assert_eq!(store.tx_now(|tx| sync(tx)).unwrap(), normal);
    assert_eq!(store.tx_durable(|tx| sync(tx)).unwrap(), full);
    assert_eq!(store.tx_durable_then(|tx| sync(tx), |_| {}).unwrap(), full);
    assert_eq!(store.tx(|tx| sync(tx)).unwrap(), normal, "back to NORMAL");
    assert_eq!(store.tx_now(|tx| sync(tx)).unwrap(), normal);
}

/// Issue 50: the promises made while no sync ran are all kept by one fsync of the WAL, whoever
/// waits for them and in whatever order; a promise made after that fsync waits for another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promises_made_together_are_kept_by_one_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(Store::open(&dir.path().join("t.db")).unwrap());
    let promise = |store: &Store| {
        store
            .tx_promise_then(
                |tx| tx.execute("PRAGMA user_version = user_version", []),
                |_| {},
            )
            .unwrap()
            .1
    };
    let made: Vec<_> = (0..20).map(|_| promise(&store)).collect();
    assert!(made.windows(2).all(|w| w[0] < w[1]), "{made:?}");
    assert_eq!(store.promise_fsyncs(), 0, "nothing waited for: no fsync");
    let mut waits = tokio::task::JoinSet::new();
    for p in made.iter().rev() {
        let (store, p) = (store.clone(), *p);
        waits.spawn(async move { store.keep(p).await });
    }
    let blocking = {
        let (store, p) = (store.clone(), made[3]);
        std::thread::spawn(move || store.keep_blocking(p))
    };
    while let Some(r) = waits.join_next().await {
        r.unwrap();
    }
    blocking.join().unwrap();
    assert_eq!(store.promise_fsyncs(), 1, "one fsync for the twenty");
    // Kept already: no new fsync.
    store.keep(made[19]).await;
    store.keep_blocking(made[0]);
    assert_eq!(store.promise_fsyncs(), 1);
    let later = promise(&store);
    store.keep(later).await;
    assert_eq!(
        store.promise_fsyncs(),
        2,
        "a later promise waits for a sync of its own"
    );
}

/// A store in memory has nothing to sync: its promises are kept at once.
#[tokio::test]
async fn a_promise_in_memory_is_kept_at_once() {
    let store = Store::open_in_memory().unwrap();
    let (_, p) = store
        .tx_promise_then(|tx| tx.execute("PRAGMA user_version = 1", []), |_| {})
        .unwrap();
    store.keep(p).await;
    store.keep_blocking(p);
    assert_eq!(store.promise_fsyncs(), 0);
}
