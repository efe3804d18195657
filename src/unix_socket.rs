//! Unix sockets at any path. A socket address holds at most [`MAX_PATH_BYTES`] of path
//! (`sun_path` is 108 bytes with its terminating NUL), and `DATA_DIR` alone may be longer
//! than that. A longer path is bound and reached through a descriptor of its folder
//! (`/proc/self/fd/N/NAME`), so the socket still lies at its own path, with that folder's
//! permissions, and bubblewrap mounts it into a sandbox by that path (a mount source may be
//! as long as any path; inside, the relay reaches it at a short path of its own).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The longest path a Unix socket address holds, in bytes.
pub const MAX_PATH_BYTES: usize = 107;

/// Whether `path` fits in a socket address as it is.
pub fn fits(path: &Path) -> bool {
    path.as_os_str().len() <= MAX_PATH_BYTES
}

/// Listens on a new Unix socket at `path`, however long. The socket file must not exist
/// yet; its folder must.
pub fn bind(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    let short = Short::of(path)?;
    tokio::net::UnixListener::bind(&short.name).map_err(|e| short.explain(e))
}

/// Connects to the Unix socket at `path`, however long.
pub async fn connect(path: &Path) -> std::io::Result<tokio::net::UnixStream> {
    let short = Short::of(path)?;
    tokio::net::UnixStream::connect(&short.name)
        .await
        .map_err(|e| short.explain(e))
}

/// A name for a socket path that fits in an address, and the folder descriptor it goes
/// through (held until the socket is bound or connected).
struct Short {
    name: PathBuf,
    folder: Option<OwnedFd>,
}

impl Short {
    fn of(path: &Path) -> std::io::Result<Short> {
        if fits(path) {
            return Ok(Short {
                name: path.to_owned(),
                folder: None,
            });
        }
        let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        let file = path
            .file_name()
            .ok_or_else(|| invalid(format!("{} names no socket file", path.display())))?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let folder: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("Could not open {}, the socket's folder: {e}", dir.display()),
                )
            })?
            .into();
        let name = Path::new(&format!("/proc/self/fd/{}", folder.as_raw_fd())).join(file);
        if !fits(&name) {
            return Err(invalid(format!(
                "the socket's file name {} is too long: a Unix socket address holds at most \
                 {MAX_PATH_BYTES} bytes",
                Path::new(file).display()
            )));
        }
        Ok(Short {
            name,
            folder: Some(folder),
        })
    }

    /// `e` with what was done, when the path went through the folder's descriptor.
    fn explain(&self, e: std::io::Error) -> std::io::Error {
        if self.folder.is_none() {
            return e;
        }
        std::io::Error::new(
            e.kind(),
            format!(
                "{e} (the path is longer than the {MAX_PATH_BYTES} bytes a socket address \
                 holds, so it was reached through its folder's descriptor as {}, which needs \
                 /proc)",
                self.name.display()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_socket_deeper_than_an_address_holds_is_bound_and_reached_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&deep).unwrap();
        let path = deep.join("model-proxy.sock");
        assert!(!fits(&path));
        let listener = bind(&path).unwrap();
        assert!(
            std::fs::symlink_metadata(&path).is_ok(),
            "the socket is at its own path"
        );
        let served = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            stream.write_all(b"hello").await.unwrap();
        });
        let mut stream = connect(&path).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        served.await.unwrap();
        assert_eq!(answer, "hello");
    }

    #[tokio::test]
    async fn a_short_path_is_used_as_it_is_and_a_missing_folder_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        assert!(fits(&path));
        let _listener = bind(&path).unwrap();
        assert!(connect(&path).await.is_ok());
        let missing = dir.path().join("m".repeat(120)).join("s.sock");
        let err = bind(&missing).unwrap_err().to_string();
        assert!(err.contains("the socket's folder"), "{err}");
        let err = bind(&dir.path().join("n".repeat(120)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("too long") && err.contains("107"), "{err}");
    }
}
