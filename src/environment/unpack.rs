//! Unpacking image layers into a root folder, treating every layer as hostile: no entry
//! may land outside the root (`..`, absolute names, a symlink among its parents), nothing
//! is written through a symlink, device nodes and FIFOs are skipped, setuid and setgid bits
//! are dropped, hard links point only at files already inside, and OCI whiteouts apply.
//!
//! Paths are joined to the root only after each parent was seen, without following it, to
//! be a real directory; nothing but this unpacker writes in the folder while it works, so
//! that check cannot go stale except by our own removals, which forget what they touch.

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::io::{self, BufReader, Read};
use std::ops::Bound;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use sha2::Digest as _;

use super::pull_error::{PullError, PullErrorKind};
use crate::ids::image::{Digest, ImageRef};

const WHITEOUT: &str = ".wh.";
/// The longest GNU long-name or long-link body, or PAX extension list, read into memory.
const EXTENSION_MAX: u64 = 64 << 10;
/// What an entry costs against the size cap besides its content and names: an inode and
/// a block, so that a layer of millions of empty entries cannot pass as small.
const ENTRY_COST: u64 = 4096;
/// Tar entries one image may hold, extension headers included.
const ENTRIES_MAX: u64 = 2_000_000;
/// Uncompressed bytes a layer may hold beyond the image's size cap: headers, padding and
/// the end-of-archive blocks.
const STREAM_ALLOWANCE: u64 = 1 << 20;
const OPAQUE: &str = ".wh..wh..opq";

/// How a layer blob is compressed, from its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub(super) fn for_media_type(media_type: &str) -> Option<Self> {
        let base = media_type
            .replace(".nondistributable.", ".")
            .replace(".foreign.", ".");
        match base.as_str() {
            "application/vnd.oci.image.layer.v1.tar"
            | "application/vnd.docker.image.rootfs.diff.tar" => Some(Self::None),
            "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Some(Self::Gzip),
            "application/vnd.oci.image.layer.v1.tar+zstd" => Some(Self::Zstd),
            _ => None,
        }
    }
}

/// A layer blob (already verified), open, and the digest of its uncompressed tar.
pub(super) struct LayerFile<'a> {
    pub file: fs::File,
    pub digest: &'a Digest,
    pub compression: Compression,
    pub diff_id: &'a Digest,
}

/// What unpacking wrote.
#[derive(Debug, Default)]
pub(super) struct Unpacked {
    /// Bytes charged against the cap: file contents, names, and `ENTRY_COST` per entry.
    pub bytes: u64,
    /// Device nodes and FIFOs left out.
    pub skipped: usize,
    /// Folders emptied by opaque whiteouts, each at most once per layer.
    pub opaque: usize,
}

/// Unpacks the layers, lowest first, into `root` (an empty folder); stops with an error
/// once what they charge passes `limit` bytes or they hold more than `ENTRIES_MAX` entries.
pub(super) fn unpack(
    image: &ImageRef,
    root: &Path,
    layers: Vec<LayerFile<'_>>,
    limit: u64,
) -> Result<Unpacked, PullError> {
    let mut unpacker = Unpacker {
        image,
        root,
        limit,
        layer: "",
        entries: 0,
        dirs: BTreeSet::new(),
        this_layer: HashSet::new(),
        opaque_done: HashSet::new(),
        done: Unpacked::default(),
    };
    for layer in layers {
        unpacker.layer = layer.digest.as_str();
        unpacker.this_layer.clear();
        unpacker.opaque_done.clear();
        unpacker.layer_file(layer)?;
    }
    Ok(unpacker.done)
}

struct Unpacker<'a> {
    image: &'a ImageRef,
    root: &'a Path,
    limit: u64,
    layer: &'a str,
    entries: u64,
    /// Relative paths seen, without following links, to be real directories; ordered so
    /// that a folder's descendants lie together after it, to be forgotten with it.
    dirs: BTreeSet<PathBuf>,
    /// What the current layer wrote: its own whiteouts do not remove these.
    this_layer: HashSet<PathBuf>,
    /// Folders the current layer made opaque already: a layer repeating the marker must
    /// not cost a folder listing per copy.
    opaque_done: HashSet<PathBuf>,
    done: Unpacked,
}

/// Hashes what passes through, to check the uncompressed layer against its diff id, and
/// fails once more than `left` bytes came out of the decompressor.
struct Hashing<R> {
    inner: R,
    hasher: sha2::Sha256,
    left: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::FileTooLarge,
                "the layer decompresses past the cap",
            )
        })?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// What GNU long-name/long-link and PAX headers said about the entry that follows them.
#[derive(Default)]
struct Extensions {
    path: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    size: Option<u64>,
}

impl Extensions {
    fn is_empty(&self) -> bool {
        self.path.is_none() && self.link.is_none() && self.size.is_none()
    }
}

impl<'a> Unpacker<'a> {
    fn layer_file(&mut self, layer: LayerFile<'a>) -> Result<(), PullError> {
        let file = layer.file;
        let reader: Box<dyn Read> = match layer.compression {
            Compression::None => Box::new(BufReader::with_capacity(1 << 16, file)),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(
                BufReader::with_capacity(1 << 16, file),
            )),
            Compression::Zstd => Box::new(
                zstd::stream::read::Decoder::new(file).map_err(|e| self.broken(&e.to_string()))?,
            ),
        };
        let mut archive = tar::Archive::new(Hashing {
            inner: reader,
            hasher: sha2::Sha256::new(),
            left: self.limit.saturating_add(STREAM_ALLOWANCE),
        });
        // Raw: tar would otherwise read extension bodies of any declared size into memory
        // before we see them.
        let entries = archive
            .entries()
            .map_err(|e| self.read_error(&e))?
            .raw(true);
        let mut skipped = 0;
        let mut pending = Extensions::default();
        for entry in entries {
            let mut entry = entry.map_err(|e| self.read_error(&e))?;
            self.entries += 1;
            if self.entries > ENTRIES_MAX {
                return Err(PullError::new(
                    PullErrorKind::TooLarge,
                    self.image,
                    format!(
                        "it holds more than {ENTRIES_MAX} tar entries; nothing of it was kept (choose a smaller image)"
                    ),
                ));
            }
            use tar::EntryType as T;
            match entry.header().entry_type() {
                T::GNULongName => pending.path = Some(self.gnu_name(&mut entry)?),
                T::GNULongLink => pending.link = Some(self.gnu_name(&mut entry)?),
                T::XHeader => self.pax(&mut entry, &mut pending)?,
                // Global defaults (tar's own comments, mostly); nothing here uses them.
                T::XGlobalHeader => drop(self.extension(&mut entry)?),
                _ => {
                    let extensions = std::mem::take(&mut pending);
                    skipped += usize::from(self.entry(entry, extensions)?);
                }
            }
        }
        if !pending.is_empty() {
            return Err(self.broken("it ends with extension headers but no entry after them"));
        }
        let mut rest = archive.into_inner();
        io::copy(&mut rest, &mut io::sink()).map_err(|e| self.read_error(&e))?;
        let actual = Digest::from_sha256(rest.hasher.finalize().into());
        if actual != *layer.diff_id {
            return Err(PullError::new(
                PullErrorKind::DigestMismatch,
                self.image,
                format!(
                    "the layer {} unpacks to content with the digest {actual}, not the {} its config names; nothing of it was kept (push the image again)",
                    layer.digest, layer.diff_id
                ),
            ));
        }
        if skipped > 0 {
            tracing::warn!(
                image = %self.image,
                layer = %layer.digest,
                "left out {skipped} device nodes and FIFOs: the sandbox brings its own /dev, and a device node from an image would give access to the host's devices"
            );
            self.done.skipped += skipped;
        }
        Ok(())
    }

    /// An extension header's body, refused past `EXTENSION_MAX`.
    fn extension<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<Vec<u8>, PullError> {
        let size = entry.size();
        if size > EXTENSION_MAX {
            let name = entry.path_bytes().into_owned();
            return Err(self.hostile(
                &name,
                &format!(
                    "is an extension header of {size} bytes; more than {EXTENSION_MAX} is refused"
                ),
            ));
        }
        self.charge(ENTRY_COST + size)?;
        let mut body = Vec::with_capacity(size as usize);
        entry
            .read_to_end(&mut body)
            .map_err(|e| self.read_error(&e))?;
        Ok(body)
    }

    fn gnu_name<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<Vec<u8>, PullError> {
        let mut name = self.extension(entry)?;
        while name.last() == Some(&0) {
            name.pop();
        }
        Ok(name)
    }

    fn pax<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        pending: &mut Extensions,
    ) -> Result<(), PullError> {
        let body = self.extension(entry)?;
        for extension in tar::PaxExtensions::new(&body) {
            let extension = extension.map_err(|e| self.read_error(&e))?;
            let value = extension.value_bytes();
            match extension.key_bytes() {
                b"path" => pending.path = Some(value.to_vec()),
                b"linkpath" => pending.link = Some(value.to_vec()),
                b"size" => {
                    let size = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| self.broken("a PAX header has a size that is no number"))?;
                    pending.size = Some(size);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// One tar entry; true when it was a device node or FIFO and left out.
    fn entry<R: Read>(
        &mut self,
        mut entry: tar::Entry<'_, R>,
        extensions: Extensions,
    ) -> Result<bool, PullError> {
        use tar::EntryType as T;
        let kind = entry.header().entry_type();
        let raw = extensions
            .path
            .unwrap_or_else(|| entry.path_bytes().into_owned());
        // Read raw, the body is as long as the header says; another reader would take the
        // PAX size, and the two must not see different files.
        if extensions.size.is_some_and(|size| size != entry.size()) {
            return Err(self.hostile(
                &raw,
                "has a PAX size that differs from its header's; readers would disagree on its content",
            ));
        }
        if kind == T::GNUSparse {
            return Err(self.hostile(
                &raw,
                "is a GNU sparse file, which is not unpacked; build the layer without sparse files",
            ));
        }
        let link = extensions
            .link
            .or_else(|| entry.link_name_bytes().map(|t| t.into_owned()));
        self.charge(ENTRY_COST + raw.len() as u64 + link.as_ref().map_or(0, |l| l.len() as u64))?;
        let Some(path) = self.relative(&raw)? else {
            return Ok(false);
        };
        let name = path.file_name().unwrap_or_default().as_bytes();
        if name.starts_with(WHITEOUT.as_bytes()) {
            self.whiteout(&path, &raw)?;
            return Ok(false);
        }
        if matches!(kind, T::Char | T::Block | T::Fifo) {
            return Ok(true);
        }
        let parent = path.parent().unwrap_or(Path::new(""));
        self.parents(parent, &raw, true)?;
        let mode = entry.header().mode().unwrap_or(0o644);
        match kind {
            T::Directory => self.directory(&path, mode)?,
            T::Regular | T::Continuous => self.file(&path, mode, &mut entry)?,
            T::Symlink => {
                let target = link
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| self.hostile(&raw, "is a symlink without a target"))?;
                self.clear(&path)?;
                let full = self.root.join(&path);
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), &full)
                    .map_err(|e| self.local(&full, &e))?;
            }
            T::Link => self.hard_link(&path, link.unwrap_or_default(), &raw)?,
            _ => {
                return Err(self.hostile(
                    &raw,
                    &format!(
                        "has the tar type {:?}, which is not a file system entry",
                        kind
                    ),
                ));
            }
        }
        self.this_layer.insert(path);
        Ok(false)
    }

    /// The entry's name as a path inside the root, `None` for the root itself.
    fn relative(&self, raw: &[u8]) -> Result<Option<PathBuf>, PullError> {
        let mut path = PathBuf::new();
        for component in Path::new(OsStr::from_bytes(raw)).components() {
            match component {
                Component::Normal(part) => path.push(part),
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => {
                    return Err(self.hostile(raw, "is an absolute name"));
                }
                Component::ParentDir => {
                    return Err(self.hostile(raw, "climbs out with `..`"));
                }
            }
        }
        Ok((!path.as_os_str().is_empty()).then_some(path))
    }

    /// Checks that every folder from the root down to `dir` is a real directory, never a
    /// symlink; with `create`, makes missing ones (tar files may leave them implicit).
    /// Without it, tells whether they all exist.
    fn parents(&mut self, dir: &Path, raw: &[u8], create: bool) -> Result<bool, PullError> {
        let mut prefix = PathBuf::new();
        for component in dir.components() {
            prefix.push(component);
            if self.dirs.contains(&prefix) {
                continue;
            }
            let full = self.root.join(&prefix);
            match fs::symlink_metadata(&full) {
                Ok(meta) if meta.file_type().is_dir() => {}
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(self.hostile(
                        raw,
                        &format!(
                            "lies under `{}`, a symlink: writing through it could leave the image's root",
                            prefix.display()
                        ),
                    ));
                }
                Ok(_) => {
                    return Err(self.hostile(
                        raw,
                        &format!(
                            "lies under `{}`, which is not a directory",
                            prefix.display()
                        ),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                    fs::create_dir(&full).map_err(|e| self.local(&full, &e))?;
                    fs::set_permissions(&full, fs::Permissions::from_mode(0o755))
                        .map_err(|e| self.local(&full, &e))?;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(self.local(&full, &e)),
            }
            self.dirs.insert(prefix.clone());
        }
        Ok(true)
    }

    fn directory(&mut self, path: &Path, mode: u32) -> Result<(), PullError> {
        let full = self.root.join(path);
        match fs::symlink_metadata(&full) {
            Ok(meta) if meta.file_type().is_dir() => {}
            Ok(_) => {
                self.clear(path)?;
                fs::create_dir(&full).map_err(|e| self.local(&full, &e))?;
            }
            Err(_) => fs::create_dir(&full).map_err(|e| self.local(&full, &e))?,
        }
        fs::set_permissions(&full, fs::Permissions::from_mode(clean_mode(mode, true)))
            .map_err(|e| self.local(&full, &e))?;
        self.dirs.insert(path.to_path_buf());
        Ok(())
    }

    fn file<R: Read>(
        &mut self,
        path: &Path,
        mode: u32,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<(), PullError> {
        let size = entry.size();
        self.charge(size)?;
        // Removed first, never truncated: the old name may be a hard link that another
        // path shares, or a symlink.
        self.clear(path)?;
        let full = self.root.join(path);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&full)
            .map_err(|e| self.local(&full, &e))?;
        let copied = io::copy(entry, &mut file).map_err(|e| self.read_error(&e))?;
        if copied != size {
            return Err(self.broken(&format!("`{}` ends early", path.display())));
        }
        file.set_permissions(fs::Permissions::from_mode(clean_mode(mode, false)))
            .map_err(|e| self.local(&full, &e))?;
        if let Ok(mtime) = entry.header().mtime() {
            let _ =
                file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime));
        }
        Ok(())
    }

    fn hard_link(&mut self, path: &Path, target: Vec<u8>, raw: &[u8]) -> Result<(), PullError> {
        let Some(target) = self.relative(&target)? else {
            return Err(self.hostile(raw, "is a hard link to the root folder"));
        };
        let parent = target.parent().unwrap_or(Path::new(""));
        let exists = self.parents(parent, raw, false)?;
        let kind = fs::symlink_metadata(self.root.join(&target)).map(|m| m.file_type());
        match kind {
            Ok(kind) if exists && (kind.is_file() || kind.is_symlink()) => {}
            _ => {
                return Err(self.hostile(
                    raw,
                    &format!(
                        "is a hard link to `{}`, which is no file already inside the image",
                        target.display()
                    ),
                ));
            }
        }
        if target == path {
            return Ok(());
        }
        self.clear(path)?;
        let full = self.root.join(path);
        fs::hard_link(self.root.join(&target), &full).map_err(|e| self.local(&full, &e))
    }

    /// `.wh.NAME` removes NAME of the lower layers; `.wh..wh..opq` empties its folder of
    /// everything the lower layers put there.
    fn whiteout(&mut self, path: &Path, raw: &[u8]) -> Result<(), PullError> {
        let parent = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let name = path.file_name().unwrap_or_default().as_bytes();
        if name == OPAQUE.as_bytes() {
            if !self.opaque_done.contains(&parent) && self.parents(&parent, raw, true)? {
                self.clear_lower(&parent)?;
                self.done.opaque += 1;
                self.opaque_done.insert(parent);
            }
            return Ok(());
        }
        if name.starts_with(b".wh..wh.") {
            // aufs bookkeeping (`.wh..wh.plnk`, …), meaningless here.
            return Ok(());
        }
        let target = &name[WHITEOUT.len()..];
        if target.is_empty() || target == b"." || target == b".." {
            return Err(self.hostile(raw, "is a whiteout of the folder itself or its parent"));
        }
        let victim = parent.join(OsStr::from_bytes(target));
        if self.parents(&parent, raw, false)? && !self.this_layer.contains(&victim) {
            self.clear(&victim)?;
        }
        Ok(())
    }

    /// Removes what lower layers left in `dir`, keeping the current layer's entries.
    fn clear_lower(&mut self, dir: &Path) -> Result<(), PullError> {
        let full = self.root.join(dir);
        let children = fs::read_dir(&full).map_err(|e| self.local(&full, &e))?;
        for child in children {
            let child = child.map_err(|e| self.local(&full, &e))?;
            let relative = dir.join(child.file_name());
            if !self.this_layer.contains(&relative) {
                self.clear(&relative)?;
            } else if child.file_type().is_ok_and(|t| t.is_dir()) {
                self.clear_lower(&relative)?;
            }
        }
        Ok(())
    }

    /// Removes whatever is at `path`, without following a symlink there.
    fn clear(&mut self, path: &Path) -> Result<(), PullError> {
        let full = self.root.join(path);
        let removed = match fs::symlink_metadata(&full) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => Err(e),
            Ok(meta) if meta.file_type().is_dir() => {
                // Not a scan of every folder seen: a layer of many folder whiteouts would
                // make that quadratic.
                let below: Vec<PathBuf> = self
                    .dirs
                    .range::<Path, _>((Bound::Included(path), Bound::Unbounded))
                    .take_while(|d| d.starts_with(path))
                    .cloned()
                    .collect();
                for dir in below {
                    self.dirs.remove(&dir);
                }
                // Does not follow symlinks inside (std's fix for CVE-2022-21658).
                fs::remove_dir_all(&full)
            }
            Ok(_) => fs::remove_file(&full),
        };
        removed.map_err(|e| self.local(&full, &e))
    }

    fn hostile(&self, raw: &[u8], reason: &str) -> PullError {
        PullError::new(
            PullErrorKind::HostileLayer,
            self.image,
            format!(
                "its layer {} is unsafe: the entry `{}` {reason}; nothing of the image was kept (build the image from a base you trust)",
                self.layer,
                String::from_utf8_lossy(raw).escape_debug()
            ),
        )
    }

    fn charge(&mut self, bytes: u64) -> Result<(), PullError> {
        self.done.bytes = self.done.bytes.saturating_add(bytes);
        if self.done.bytes > self.limit {
            return Err(self.too_large());
        }
        Ok(())
    }

    fn too_large(&self) -> PullError {
        PullError::new(
            PullErrorKind::TooLarge,
            self.image,
            format!(
                "it unpacks to more than ENVIRONMENT_CACHE_MAX ({} bytes); raise the cap or choose a smaller image",
                self.limit
            ),
        )
    }

    fn read_error(&self, error: &io::Error) -> PullError {
        if error.kind() == io::ErrorKind::FileTooLarge {
            return self.too_large();
        }
        self.broken(&error.to_string())
    }

    fn broken(&self, detail: &str) -> PullError {
        PullError::new(
            PullErrorKind::Unsupported,
            self.image,
            format!(
                "its layer {} is not a readable tar archive ({detail}); nothing of the image was kept",
                self.layer
            ),
        )
    }

    fn local(&self, path: &Path, error: &io::Error) -> PullError {
        PullError::local(self.image, path, error)
    }
}

/// The entry's permissions without setuid, setgid, sticky or group and world write (the
/// cache is shared, an image's files are read by every run), readable (and, where anyone
/// may execute or it is a folder, enterable) by the sandbox's unprivileged user; folders
/// stay writable by their owner so that later layers and eviction can change them.
fn clean_mode(mode: u32, directory: bool) -> u32 {
    let mode = mode & 0o755;
    let execute = directory || mode & 0o111 != 0;
    let owner = if directory { 0o700 } else { 0o400 };
    mode | owner | 0o004 | if execute { 0o001 } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_lose_setuid_and_world_write_and_become_readable() {
        assert_eq!(clean_mode(0o4755, false), 0o755);
        assert_eq!(clean_mode(0o2750, false), 0o755);
        assert_eq!(clean_mode(0o600, false), 0o604);
        assert_eq!(clean_mode(0o1777, true), 0o755);
        assert_eq!(clean_mode(0o666, false), 0o644);
        assert_eq!(clean_mode(0o777, false), 0o755);
        assert_eq!(clean_mode(0o500, true), 0o705);
    }

    /// One layer as a file, with its digest as both blob and diff id (it is stored raw).
    fn layer_file(dir: &Path, name: &str, tar: &[u8]) -> (fs::File, Digest) {
        let path = dir.join(name);
        fs::write(&path, tar).unwrap();
        (fs::File::open(&path).unwrap(), Digest::of(tar))
    }

    #[test]
    fn a_layer_repeating_an_opaque_marker_empties_the_folder_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("rootfs");
        fs::create_dir(&root).unwrap();
        let entry = |builder: &mut tar::Builder<Vec<u8>>, name: &str, kind, data: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(kind);
            header.set_mode(0o755);
            header.set_size(data.len() as u64);
            builder.append_data(&mut header, name, data).unwrap();
        };
        let mut lower = tar::Builder::new(Vec::new());
        entry(&mut lower, "d", tar::EntryType::Directory, b"");
        for i in 0..100 {
            entry(
                &mut lower,
                &format!("d/old{i}"),
                tar::EntryType::Regular,
                b"old",
            );
        }
        let mut upper = tar::Builder::new(Vec::new());
        entry(&mut upper, "d/new", tar::EntryType::Regular, b"new");
        for _ in 0..10_000 {
            entry(&mut upper, "d/.wh..wh..opq", tar::EntryType::Regular, b"");
        }
        entry(&mut upper, "d/after", tar::EntryType::Regular, b"after");
        let (lower_file, lower_digest) =
            layer_file(dir.path(), "lower", &lower.into_inner().unwrap());
        let (upper_file, upper_digest) =
            layer_file(dir.path(), "upper", &upper.into_inner().unwrap());
        let image = ImageRef::parse("registry.example/opaque/markers:1").unwrap();
        let layers = vec![
            LayerFile {
                file: lower_file,
                digest: &lower_digest,
                compression: Compression::None,
                diff_id: &lower_digest,
            },
            LayerFile {
                file: upper_file,
                digest: &upper_digest,
                compression: Compression::None,
                diff_id: &upper_digest,
            },
        ];
        let done = unpack(&image, &root, layers, u64::MAX / 2).unwrap();
        assert_eq!(done.opaque, 1, "one folder listing for 10 000 markers");
        let mut names: Vec<_> = fs::read_dir(root.join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["after", "new"]);
    }

    /// Removing a folder forgets that its subfolders were checked, and only theirs: a
    /// later layer putting a symlink where one was cannot be written through.
    #[test]
    fn a_removed_folder_is_forgotten_with_its_subfolders_only() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().join("rootfs");
        fs::create_dir(&root).unwrap();
        let mut unpacker = Unpacker {
            image: &ImageRef::parse("registry.example/forget/dirs:1").unwrap(),
            root: &root,
            limit: u64::MAX,
            layer: "test",
            entries: 0,
            dirs: BTreeSet::new(),
            this_layer: HashSet::new(),
            opaque_done: HashSet::new(),
            done: Unpacked::default(),
        };
        for folder in ["a", "a/b", "a/b/c", "a.b", "a/bc", "ab"] {
            unpacker.directory(Path::new(folder), 0o755).unwrap();
        }
        unpacker.clear(Path::new("a/b")).unwrap();
        let left: Vec<_> = unpacker
            .dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        assert_eq!(left, ["a", "a/bc", "a.b", "ab"]);
        std::os::unix::fs::symlink(outside.path(), root.join("a/b")).unwrap();
        let error = unpacker
            .parents(Path::new("a/b/c"), b"a/b/c/x", true)
            .unwrap_err();
        assert_eq!(error.kind, PullErrorKind::HostileLayer, "{error}");
        assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
    }

    #[test]
    fn media_types_name_their_compression() {
        for (media_type, compression) in [
            ("application/vnd.oci.image.layer.v1.tar", Compression::None),
            (
                "application/vnd.oci.image.layer.v1.tar+gzip",
                Compression::Gzip,
            ),
            (
                "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
                Compression::Gzip,
            ),
            (
                "application/vnd.oci.image.layer.v1.tar+zstd",
                Compression::Zstd,
            ),
            (
                "application/vnd.docker.image.rootfs.diff.tar.gzip",
                Compression::Gzip,
            ),
            (
                "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
                Compression::Gzip,
            ),
        ] {
            assert_eq!(Compression::for_media_type(media_type), Some(compression));
        }
        assert_eq!(
            Compression::for_media_type("application/vnd.cncf.helm.chart.content.v1.tar+gzip"),
            None
        );
    }
}
