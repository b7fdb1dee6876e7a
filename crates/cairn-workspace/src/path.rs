//! Paths of the working directory: the one rule that keeps every path a
//! record names inside it, and the walk that creates a file's parents
//! without ever going through a symlink.

use std::path::{Path, PathBuf};

use crate::WorkspaceError;

/// Checks a path from a record: relative, `/`-separated, made of normal
/// components only (no empty, `.` or `..` component), never inside `.git`.
///
/// # Errors
///
/// What is wrong with it.
pub fn check(rel: &str) -> Result<(), String> {
    if rel.is_empty() {
        return Err("it is empty".into());
    }
    if rel.starts_with('/') {
        return Err("it is absolute".into());
    }
    if rel.contains('\0') || rel.contains('\\') {
        return Err("it holds a NUL or a backslash".into());
    }
    for c in rel.split('/') {
        match c {
            "" | "." => return Err("it has an empty or `.` component".into()),
            ".." => return Err("it climbs out with `..`".into()),
            ".git" => {
                return Err("it is inside a `.git` directory, which cairn never touches".into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// `path` relative to `root`, `/`-separated, when it is inside it and
/// passes [`check`]; `None` otherwise (outside, not UTF-8, `.git`).
pub fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(s) => parts.push(s.to_str()?),
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                parts.pop()?;
            }
            std::path::Component::RootDir | std::path::Component::Prefix(_) => return None,
        }
    }
    let rel = parts.join("/");
    check(&rel).ok()?;
    Some(rel)
}

/// Where `rel` is under `root`, after checking that no directory on the
/// way is a symlink (or anything but a directory); with `create`, missing
/// directories are created (mode 0755 less the umask).
///
/// # Errors
///
/// [`WorkspaceError::Unsafe`] for a path that breaks [`check`] or goes
/// through a symlink; [`WorkspaceError::Io`] when a directory cannot be
/// read or created.
pub fn confined(root: &Path, rel: &str, create: bool) -> Result<PathBuf, WorkspaceError> {
    let unsafe_path = |why: String| WorkspaceError::Unsafe {
        path: rel.to_owned(),
        why,
    };
    check(rel).map_err(unsafe_path)?;
    let parts: Vec<&str> = rel.split('/').collect();
    let mut at = root.to_owned();
    for dir in &parts[..parts.len() - 1] {
        at.push(dir);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(unsafe_path(format!(
                    "{} is a symlink, and a restore never writes through one",
                    at.display()
                )));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(unsafe_path(format!("{} is not a directory", at.display())));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                std::fs::create_dir(&at).map_err(crate::io_err("create", &at))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(root.join(rel));
            }
            Err(e) => return Err(crate::io_err("read", &at)(e)),
        }
    }
    Ok(root.join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_the_working_directory_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            ".git/config",
            "a/.git/index",
            "a\\b",
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "a/b.txt", ".gitignore", "dir/.hidden", "..a", "a.."] {
            assert!(check(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn a_restore_never_writes_through_a_symlinked_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("w");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let e = confined(&root, "link/evil.txt", true).unwrap_err();
        assert!(matches!(e, WorkspaceError::Unsafe { .. }), "{e}");
        assert_eq!(
            confined(&root, "new/dir/f.txt", true).unwrap(),
            root.join("new/dir/f.txt")
        );
        assert!(root.join("new/dir").is_dir());
    }

    #[test]
    fn relative_paths_stay_inside_the_root() {
        let root = Path::new("/w");
        assert_eq!(relative(root, Path::new("/w/a/./b")), Some("a/b".into()));
        assert_eq!(relative(root, Path::new("/w/a/../../x")), None);
        assert_eq!(relative(root, Path::new("/elsewhere/x")), None);
        assert_eq!(relative(root, Path::new("/w/.git/HEAD")), None);
    }
}
