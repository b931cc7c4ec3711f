//! Where the daemon's cgroup is: its path from `/proc/self/cgroup` and the `cgroup2` mount from
//! `/proc/self/mountinfo` (the kernel's formats: `Documentation/admin-guide/cgroup-v2.rst` and
//! `proc(5)`).

use std::path::PathBuf;

/// The daemon's cgroup v2 path (the `0::` line of `/proc/self/cgroup`), e.g. `/app.slice/x`.
pub fn own_cgroup(proc_self_cgroup: &str) -> Option<&str> {
    proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim)
}

/// A `cgroup2` mount of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2Mount {
    /// The cgroup path shown at the mount point (`/` unless a cgroup namespace differs).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// The `cgroup2` mounts in the text of `/proc/self/mountinfo` (proc(5): fields 4 and 5 are the
/// root and mount point, 6 the mount options; the file system type follows the ` - `).
pub fn cgroup2_mounts(mountinfo: &str) -> Vec<Cgroup2Mount> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let f: Vec<&str> = left.split_whitespace().collect();
        if f.len() < 6 {
            continue;
        }
        out.push(Cgroup2Mount {
            root: unescape(f[3]),
            mount_point: PathBuf::from(unescape(f[4])),
            read_only: f[5].split(',').any(|o| o == "ro"),
        });
    }
    out
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where the daemon's cgroup is in the file system: `Ok(folder)`, or why it cannot be used.
pub fn locate(proc_self_cgroup: &str, mountinfo: &str) -> Result<PathBuf, String> {
    let path = own_cgroup(proc_self_cgroup)
        .ok_or("no cgroup v2 hierarchy (no `0::` line in /proc/self/cgroup)")?;
    let mounts = cgroup2_mounts(mountinfo);
    if mounts.is_empty() {
        return Err("the cgroup2 file system is not mounted".into());
    }
    let (mount, rel) = mounts
        .iter()
        .filter_map(|m| {
            let rel = if m.root == "/" {
                Some(path)
            } else {
                path.strip_prefix(m.root.as_str())
                    .filter(|r| r.is_empty() || r.starts_with('/'))
            }?;
            Some((m, rel))
        })
        .max_by_key(|(m, _)| m.root.len())
        .ok_or_else(|| format!("no cgroup2 mount shows the daemon's cgroup {path}"))?;
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        return Err(format!(
            "botvisord runs in the root cgroup of the hierarchy ({}), which is not a delegated \
             subtree",
            mount.mount_point.display()
        ));
    }
    if mount.read_only {
        return Err(format!(
            "the cgroup2 hierarchy at {} is mounted read-only",
            mount.mount_point.display()
        ));
    }
    Ok(mount.mount_point.join(rel))
}
