use super::*;

const S: &str = "s1";

struct Case {
    _root: tempfile::TempDir,
    kept: PathBuf,
    transcript: PathBuf,
}

fn case() -> Case {
    let root = tempfile::tempdir().unwrap();
    let cli = root.path().join("projects").join("-work");
    fs::create_dir_all(&cli).unwrap();
    Case {
        kept: folder(&root.path().join("botvisor.db"), "bot"),
        transcript: cli.join("s1.jsonl"),
        _root: root,
    }
}

fn line(n: u32) -> String {
    format!("{{\"sessionId\":\"{S}\",\"n\":{n}}}\n")
}

impl Case {
    fn write(&self, text: &str) {
        fs::write(&self.transcript, text).unwrap();
    }
    fn append(&self, text: &str) {
        let mut f = OpenOptions::new()
            .append(true)
            .open(&self.transcript)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }
    fn update(&self) -> Vec<Updated> {
        update(&self.kept, S, std::slice::from_ref(&self.transcript)).unwrap()
    }
    fn copy(&self) -> String {
        fs::read_to_string(self.kept.join(S).join("s1.jsonl")).unwrap()
    }
    fn restore(&self) -> Restored {
        restore(&self.kept, S, "s1.jsonl", &self.transcript).unwrap()
    }
    fn cli(&self) -> String {
        fs::read_to_string(&self.transcript).unwrap()
    }
}

#[test]
fn a_copy_grows_by_what_is_new_and_comes_back_when_the_file_is_gone() {
    let c = case();
    c.write(&line(1));
    assert_eq!(c.update(), [Updated::Appended(line(1).len() as u64)]);
    assert_eq!(c.update(), [Updated::Appended(0)], "nothing new");
    c.append(&line(2));
    assert_eq!(c.update(), [Updated::Appended(line(2).len() as u64)]);
    assert_eq!(
        c.restore(),
        Restored::Whole,
        "the CLI's file is whole: left alone"
    );
    let whole = c.cli();
    fs::remove_dir_all(c.transcript.parent().unwrap()).unwrap();
    assert_eq!(c.restore(), Restored::WasGone);
    assert_eq!(c.cli(), whole);
    c.append(&line(3));
    assert_eq!(c.update(), [Updated::Appended(line(3).len() as u64)]);
    assert_eq!(c.copy(), c.cli());
}

#[test]
fn a_conversation_of_several_files_is_copied_and_named_file_by_file() {
    let c = case();
    assert!(names(&c.kept, S).is_empty(), "no copy yet");
    let dir = c.transcript.parent().unwrap();
    let (root, segment) = (
        dir.join("rollout-t-s1.jsonl"),
        dir.join("rollout-t-s1_g.jsonl"),
    );
    fs::write(&root, line(1)).unwrap();
    fs::write(&segment, line(2)).unwrap();
    let done = update(&c.kept, S, &[root.clone(), segment.clone()]).unwrap();
    assert_eq!(done.len(), 2);
    assert_eq!(
        names(&c.kept, S),
        ["rollout-t-s1.jsonl", "rollout-t-s1_g.jsonl"]
    );
    fs::remove_file(&segment).unwrap();
    assert_eq!(
        restore(&c.kept, S, "rollout-t-s1.jsonl", &root).unwrap(),
        Restored::Whole
    );
    assert_eq!(
        restore(&c.kept, S, "rollout-t-s1_g.jsonl", &segment).unwrap(),
        Restored::WasGone
    );
    assert_eq!(fs::read_to_string(&segment).unwrap(), line(2));
}

#[test]
fn a_file_emptied_cut_or_replaced_is_set_aside_and_the_copy_put_back() {
    let whole = format!("{}{}", line(1), line(2));
    for damaged in [
        String::new(),
        format!("{}{{\"sessionId\":\"s1\",\"n", line(1)),
        "{\"sessionId\":\"other\",\"n\":9}\n".to_owned(),
        format!("{}{}", line(1), line(7)),
        format!("{}{}{}", line(1), line(7), line(8)),
    ] {
        let c = case();
        c.write(&whole);
        c.update();
        c.write(&damaged);
        let Restored::SetAside(aside) = c.restore() else {
            panic!("{damaged:?}: not put back");
        };
        assert_eq!(fs::read_to_string(aside).unwrap(), damaged, "nothing lost");
        assert_eq!(c.cli(), whole, "{damaged:?}");
        assert_eq!(c.copy(), whole, "the copy never takes what is not its own");
    }
}

#[test]
fn another_conversation_over_the_file_never_enters_the_copy() {
    let c = case();
    c.write(&line(1));
    c.update();
    c.write("{\"sessionId\":\"other\",\"n\":1}\n{\"sessionId\":\"other\",\"n\":2}\n");
    assert_eq!(c.update(), [Updated::Diverged]);
    assert_eq!(c.copy(), line(1));
}

#[test]
fn a_file_the_running_cli_made_anew_is_added_to_the_copy_and_put_back_whole() {
    // Its file removed under a running CLI, which writes the next turn into a new file.
    let c = case();
    c.write(&format!("{}{}", line(1), line(2)));
    c.update();
    c.write(&line(3));
    assert_eq!(c.update(), [Updated::Recreated(line(3).len() as u64)]);
    c.append(&line(4));
    assert_eq!(c.update(), [Updated::Appended(line(4).len() as u64)]);
    let all = format!("{}{}{}{}", line(1), line(2), line(3), line(4));
    assert_eq!(c.copy(), all);
    assert!(matches!(c.restore(), Restored::SetAside(_)));
    assert_eq!(
        c.cli(),
        all,
        "the earlier turns come back before the new ones"
    );
    assert_eq!(c.restore(), Restored::Whole);
}

#[test]
fn a_file_cut_under_the_running_cli_that_grows_again_never_enters_the_copy() {
    let c = case();
    let whole = format!("{}{}{}", line(1), line(2), line(3));
    c.write(&whole);
    c.update();
    c.write(&format!("{}{}", line(1), line(4)));
    assert_eq!(c.update(), [Updated::Diverged]);
    assert_eq!(c.copy(), whole);
    assert!(matches!(c.restore(), Restored::SetAside(_)));
    assert_eq!(c.cli(), whole);
}

#[test]
fn what_a_failed_write_left_is_cut_before_the_next_append() {
    let c = case();
    c.write(&line(1));
    c.update();
    let copy = c.kept.join(S).join("s1.jsonl");
    let torn = || {
        let mut f = OpenOptions::new().append(true).open(&copy).unwrap();
        f.write_all(b"{\"sessionId\":\"s1\",\"n").unwrap();
    };
    torn();
    c.append(&line(2));
    c.update();
    assert_eq!(c.copy(), format!("{}{}", line(1), line(2)), "no splice");
    // Its record lost too: copied whole again.
    torn();
    fs::remove_file(meta_path(&copy)).unwrap();
    c.update();
    assert_eq!(c.copy(), c.cli());
}

#[test]
fn each_file_set_aside_is_kept() {
    let c = case();
    c.write(&line(1));
    c.update();
    c.write("first damage\n");
    let Restored::SetAside(a) = c.restore() else {
        panic!("not put back")
    };
    c.write("second damage\n");
    let Restored::SetAside(b) = c.restore() else {
        panic!("not put back")
    };
    assert_ne!(a, b);
    assert_eq!(fs::read_to_string(a).unwrap(), "first damage\n");
    assert_eq!(fs::read_to_string(b).unwrap(), "second damage\n");
}

#[test]
fn a_copy_cut_mid_line_is_put_back_up_to_its_last_whole_line() {
    let c = case();
    c.write(&line(1));
    c.update();
    let mut f = OpenOptions::new()
        .append(true)
        .open(c.kept.join(S).join("s1.jsonl"))
        .unwrap();
    f.write_all(b"{\"sessionId\":\"s1\",\"n").unwrap();
    fs::remove_file(&c.transcript).unwrap();
    assert_eq!(c.restore(), Restored::WasGone);
    assert_eq!(c.cli(), line(1));
}

#[test]
fn a_folder_in_the_files_place_is_an_error_and_changes_nothing() {
    let c = case();
    c.write(&line(1));
    c.update();
    fs::remove_file(&c.transcript).unwrap();
    fs::create_dir(&c.transcript).unwrap();
    let err = restore(&c.kept, S, "s1.jsonl", &c.transcript).unwrap_err();
    assert!(err.to_string().contains("is not a file"), "{err}");
    assert!(c.transcript.is_dir());
    assert_eq!(c.copy(), line(1));
}

#[test]
fn a_session_id_never_leaves_the_folder_and_remove_takes_everything() {
    let c = case();
    c.write("x\n");
    for bad in ["", "..", "../x", ".hidden", "a/b"] {
        assert!(
            update(&c.kept, bad, std::slice::from_ref(&c.transcript))
                .unwrap()
                .is_empty()
        );
        assert!(!holds(&c.kept, bad));
        assert!(restore(&c.kept, bad, "x", &c.transcript).is_err());
    }
    assert!(!c.kept.exists());
    c.update();
    assert_eq!(origin(&c.kept, S, "s1.jsonl"), Some(c.transcript.clone()));
    remove(&c.kept).unwrap();
    assert!(!c.kept.exists());
    remove(&c.kept).unwrap();
}
