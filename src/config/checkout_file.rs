//! Reading one of the repository's own files from a checkout on the planwright host. A
//! checkout holds whatever the repository committed, symbolic links included, so a file
//! is read only when it and every folder above it inside the checkout are real, and only
//! up to a size: a link to `/etc/shadow` or `/dev/zero` is refused, never followed.

use std::io::{self, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Component, Path};

/// Settings files and devcontainers are small; a larger one is a mistake or an attack.
pub const MAX_BYTES: u64 = 1 << 20;

/// The text of `relative` inside `dir`: `Ok(None)` when it is not there, an error (in
/// words for the issue) when it is a symbolic link, not a regular file, larger than
/// [`MAX_BYTES`] or not UTF-8.
pub fn read(dir: &Path, relative: &str) -> Result<Option<String>, String> {
    let mut path = dir.to_path_buf();
    for component in Path::new(relative).components() {
        let Component::Normal(name) = component else {
            return Err(format!(
                "`{relative}` is not a plain path inside the repository"
            ));
        };
        path.push(name);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "`{relative}` is a symbolic link; planwright reads it only as a regular file in the repository"
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("`{relative}` cannot be read: {e}")),
        }
    }
    let unreadable = |e: io::Error| format!("`{relative}` cannot be read: {e}");
    // O_NOFOLLOW: a link swapped in since the check above is refused too.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(unreadable)?;
    if !file.metadata().map_err(unreadable)?.is_file() {
        return Err(format!("`{relative}` is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!(
            "`{relative}` is larger than {} KiB, more than a settings file can be",
            MAX_BYTES >> 10
        ));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| format!("`{relative}` is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_out_of_the_checkout_are_refused_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("shadow");
        std::fs::write(&secret, "root:$6$secret-hash:19000:0:99999:7:::\n").unwrap();
        let checkout = tempfile::tempdir().unwrap();
        let dir = checkout.path();
        std::fs::create_dir_all(dir.join(".github")).unwrap();
        std::os::unix::fs::symlink(&secret, dir.join(".github/planwright.yml")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.join(".devcontainer")).unwrap();
        std::fs::copy(&secret, outside.path().join("devcontainer.json")).unwrap();

        for relative in [".github/planwright.yml", ".devcontainer/devcontainer.json"] {
            let error = read(dir, relative).unwrap_err();
            assert!(error.contains("symbolic link"), "{relative}: {error}");
            assert!(!error.contains("secret-hash"), "{error}");
        }
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.json")).unwrap();
        assert!(
            read(dir, "zero.json")
                .unwrap_err()
                .contains("symbolic link")
        );
    }

    #[test]
    fn a_regular_file_is_read_a_missing_one_is_none_a_huge_one_refused() {
        let checkout = tempfile::tempdir().unwrap();
        let dir = checkout.path();
        std::fs::create_dir_all(dir.join(".github")).unwrap();
        std::fs::write(dir.join(".github/planwright.yml"), "test: make\n").unwrap();
        assert_eq!(
            read(dir, ".github/planwright.yml").unwrap().as_deref(),
            Some("test: make\n")
        );
        assert_eq!(read(dir, ".gitlab/planwright.yml").unwrap(), None);
        let big = vec![b' '; (MAX_BYTES + 1) as usize];
        std::fs::write(dir.join("big.json"), big).unwrap();
        assert!(read(dir, "big.json").unwrap_err().contains("larger than"));
        std::fs::create_dir(dir.join("folder.json")).unwrap();
        assert!(
            read(dir, "folder.json")
                .unwrap_err()
                .contains("not a regular file")
        );
    }
}
