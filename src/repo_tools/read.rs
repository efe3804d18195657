//! Reading a file no larger than the tools take, and clipping a line to what is shown.

use std::path::Path;

/// The most of one file `read_file` reads.
pub(super) const READ_MAX_BYTES: u64 = 8 << 20;
/// Characters per line shown; minified files are not worth more.
pub(super) const MAX_LINE_CHARS: usize = 300;

pub(super) fn clip_line(line: &str) -> String {
    if line.chars().count() <= MAX_LINE_CHARS {
        return line.to_owned();
    }
    let mut s: String = line.chars().take(MAX_LINE_CHARS).collect();
    s.push_str(" …");
    s
}

/// At most `READ_MAX_BYTES` of a regular file (not a pipe or a device, which could block
/// or never end), and its size.
pub(super) fn read_bounded(path: &Path) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Opening a pipe for reading waits for a writer: never block on the open either.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(READ_MAX_BYTES).read_to_end(&mut bytes)?;
    let size = meta.len().max(bytes.len() as u64);
    Ok((bytes, size))
}
