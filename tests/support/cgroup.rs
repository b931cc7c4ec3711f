//! A cgroup v2 subtree made for one test, marked delegated as systemd marks one (`Delegate=yes`
//! sets `trusted.delegate` or `user.delegate`), into which the test starts its daemon. Removed
//! at the end with everything in it.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A test's own cgroup subtree.
pub struct TestCgroup {
    /// Its folder, e.g. `/sys/fs/cgroup/unified/botvisor-test-<uuid>`.
    pub dir: PathBuf,
    /// Its path in the hierarchy, e.g. `/botvisor-test-<uuid>`, as `/proc/<pid>/cgroup` shows it.
    pub path: String,
}

impl TestCgroup {
    /// Makes one under the writable cgroup2 mount, or `None` after printing why the test is
    /// skipped (no cgroup2 mount, not writable: not root).
    pub fn new() -> Option<TestCgroup> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mounts = botvisor::process::cgroup::cgroup2_mounts(&mountinfo);
        let Some(mount) = mounts.iter().find(|m| m.root == "/" && !m.read_only) else {
            eprintln!("SKIP: no writable cgroup2 mount in /proc/self/mountinfo");
            return None;
        };
        let name = format!("botvisor-test-{}", uuid::Uuid::new_v4().simple());
        let dir = mount.mount_point.join(&name);
        if let Err(e) = std::fs::create_dir(&dir) {
            eprintln!(
                "SKIP: cannot create a cgroup under {}: {e}",
                mount.mount_point.display()
            );
            return None;
        }
        let cg = TestCgroup {
            dir,
            path: format!("/{name}"),
        };
        if let Err(e) = xattr_set(&cg.dir, "trusted.delegate", b"1") {
            eprintln!("SKIP: cannot mark the test cgroup delegated: {e}");
            return None;
        }
        Some(cg)
    }

    /// What `/proc/<pid>/cgroup` says of process `pid` (its `0::` path); empty when gone.
    pub fn of(pid: u32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or_default()
            .to_owned()
    }

    /// The hierarchy path of bot `id`'s cgroup.
    pub fn bot_path(&self, id: &str) -> String {
        format!("{}/bots/{id}", self.path)
    }

    /// The folder of bot `id`'s cgroup.
    pub fn bot_dir(&self, id: &str) -> PathBuf {
        self.dir.join("bots").join(id)
    }
}

fn xattr_set(dir: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: setxattr(2) with NUL-terminated strings and a value of the given length.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Kills what is left in `dir` and below, waits (bounded) until it is empty, removes the
/// folders depth first.
fn tear_down(dir: &Path) {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    for _ in 0..500 {
        let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap_or_default();
        if !events.contains("populated 1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    remove_tree(dir);
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.filter_map(Result::ok) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        eprintln!("cannot remove the test cgroup {}: {e}", dir.display());
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        tear_down(&self.dir);
    }
}
