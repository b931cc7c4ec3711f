//! The check every real-CLI test gets (issue 45, `support::repeats`): a message the model is
//! sent more often than the test sent it is found, whether the CLI joined the repeat into one
//! user turn or kept it as a turn of its own.

use std::collections::HashMap;

use support::repeats::{occurrences, repeats};

fn texts(t: &[&str]) -> Vec<String> {
    t.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_message_joined_with_its_retry_counts_twice() {
    let req = texts(&["first LIMIT15 job\n first LIMIT15 job"]);
    assert_eq!(occurrences("first LIMIT15 job", &req), 2);
    let sent = HashMap::from([("first LIMIT15 job".to_owned(), 1)]);
    assert_eq!(repeats(&sent, &[req]).len(), 1);
}

#[test]
fn a_message_in_two_turns_counts_twice_and_a_part_of_a_sentence_not_at_all() {
    let req = texts(&["one", "the one", "one"]);
    assert_eq!(occurrences("one", &req), 2);
    assert_eq!(occurrences("two", &req), 0);
}

#[test]
fn a_message_sent_twice_on_purpose_may_stand_twice() {
    let req = texts(&["again", "again"]);
    let sent = HashMap::from([("again".to_owned(), 2)]);
    assert!(repeats(&sent, &[req]).is_empty());
}

#[test]
fn a_message_of_several_lines_is_matched_whole() {
    let req = texts(&["a\nb\na\nb", "b"]);
    assert_eq!(occurrences("a\nb", &req), 2);
}
