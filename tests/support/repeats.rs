//! The check every real-CLI test gets (issue 45): no request the model is sent carries one of
//! the test's own messages more often than the test sent it. A message the user sent once and
//! botvisor put to the CLI again (after a usage limit, an expired login, a cut turn) must reach
//! the model once, whether the CLI keeps the failed attempt as a user turn of its own or joins
//! it with the retry into one ("first job\n first job", Claude Code 2.1.328).
//!
//! "The test's own messages" are the `user` chat items in the daemon's database (whoever sent
//! them: a proxy, `botvisorctl`, `busctl`, an adoption's import), each with how many times it
//! was sent. A request's user texts are read as the stand-in saw them; a message counts once per
//! place where its lines stand as whole lines of a user text (so a text joined to another with a
//! line break counts, a text inside a longer sentence does not).

use std::collections::HashMap;
use std::path::Path;

/// How many times each text was sent as a message, read from the `user` chat items of the
/// database at `db` (every bot's; the whole payload of an item too big for `chat_items`). An
/// unreadable database gives none: there is then nothing to check against.
pub fn sent_messages(db: &Path) -> HashMap<String, usize> {
    let mut sent = HashMap::new();
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return sent;
    };
    let _ = conn.busy_timeout(std::time::Duration::from_secs(10));
    let Ok(mut stmt) = conn.prepare(
        "SELECT COALESCE(w.payload, c.payload) FROM chat_items c \
         LEFT JOIN chat_wholes w ON w.bot_id = c.bot_id AND w.seq = c.seq \
         WHERE c.kind = 'user'",
    ) else {
        return sent;
    };
    let Ok(rows) = stmt.query_map([], |r| r.get::<_, String>(0)) else {
        return sent;
    };
    for payload in rows.flatten() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&payload) else {
            continue;
        };
        if let Some(text) = v.get("text").and_then(|t| t.as_str())
            && !text.trim().is_empty()
        {
            *sent.entry(text.to_owned()).or_default() += 1;
        }
    }
    sent
}

/// How many times `message` stands in `texts`: once per place where its lines (trimmed) are
/// whole lines (trimmed) of one text, places not overlapping.
pub fn occurrences(message: &str, texts: &[String]) -> usize {
    let want: Vec<&str> = message.trim().lines().map(str::trim).collect();
    if want.is_empty() {
        return 0;
    }
    let mut n = 0;
    for text in texts {
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let mut i = 0;
        while i + want.len() <= lines.len() {
            if lines[i..i + want.len()] == want[..] {
                n += 1;
                i += want.len();
            } else {
                i += 1;
            }
        }
    }
    n
}

/// The repeats found: for each request (its index and its user texts, as the stand-in read
/// them) a line for each message of `sent` it holds more often than it was sent.
pub fn repeats(sent: &HashMap<String, usize>, requests: &[Vec<String>]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, texts) in requests.iter().enumerate() {
        for (message, times) in sent {
            let n = occurrences(message, texts);
            if n > *times {
                found.push(format!(
                    "request {i} holds `{message}` {n} times (sent {times}): {texts:?}"
                ));
            }
        }
    }
    found
}

/// Panics with every repeat found (see [`repeats`]), unless the thread is panicking already
/// (a test that failed says why first).
pub fn assert_none(db: &Path, requests: &[Vec<String>]) {
    if std::thread::panicking() {
        return;
    }
    let found = repeats(&sent_messages(db), requests);
    assert!(
        found.is_empty(),
        "the model was sent a message more often than the test sent it (issue 45):\n{}",
        found.join("\n")
    );
}
