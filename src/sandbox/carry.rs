//! planwright's own programs inside any root: the relay and the coding CLIs come from the
//! host, read-only under [`PREFIX`], together with the host's dynamic loader and exactly the
//! shared libraries their ELF files name, and start through that loader.
//!
//! Why the loader and not the image's libraries or a rewritten binary: an image may carry
//! another glibc, musl, or no libc at all, and the host's programs are built against the
//! host's. Running `ld-linux… --library-path /.planwright/lib/NAME PROGRAM` loads the host's
//! own libraries whatever the image has, needs no copy or patch of the program, and gives
//! the image's programs nothing (no `LD_LIBRARY_PATH` reaches what the command starts).
//! Each program has a library folder of its own (NAME is its file name): the relay and a
//! CLI may need two different host files of one soname, and each gets the one it was
//! linked against. What is brought in is files only: the programs (an npm-installed CLI's
//! own package folder), the loader and the libraries, never a host configuration folder.
//!
//! What such a program opens later is another matter: glibc's loader looks for a soname in
//! the library folder and then, whatever `--inhibit-cache` and `--library-path` say, in the
//! image's `/lib/ARCH-linux-gnu`, `/usr/lib/ARCH-linux-gnu`, `/lib` and `/usr/lib` (the
//! image's `/etc/ld.so.conf` plays no part; only `ldconfig` reads it). So the image must
//! not choose what is opened. The name services: every image root gets planwright's
//! [`NSSWITCH_CONF`] (`bwrap.rs`), naming only the two sources glibc has built in since
//! 2.34, and the host's `libnss_files`/`libnss_dns` come along for an older glibc; the
//! unwinder glibc opens (`libgcc_s`) comes along too; `SHELL` is set (`base_env`) so that
//! bash need not look it up. node is told to read an empty OpenSSL configuration
//! (`--openssl-config`), not the image's, whose providers are libraries. What remains:
//! - locales and gconv: a glibc program that calls `setlocale` (the static bash does as it
//!   starts; the relay, Claude Code and node do not) reads the image's locale for
//!   `LANG=C.UTF-8`, and glibc then opens the conversion module the image's `gconv-modules`
//!   names for that charset: one line of cost 0 for UTF-8 gets the image's code into the
//!   bash. That bash holds nothing the image's programs it starts do not (one user, one
//!   environment, one sandbox), so it is left so; a `GCONV_PATH` or gconv folder of
//!   planwright's would break the image's own `iconv`.
//! - what a program opens by soname itself (Claude Code names `libsecret-1.so.0` and
//!   `libasound.so.2`, and opens neither in a run) is looked for in the image's folders
//!   when the host has none in the program's folder. An audit module (`--audit`, whose
//!   `la_objsearch` sees every candidate path) could refuse those; none is built.
//! - a static glibc program (the bash) looks for what it opens in the image's folders:
//!   with built-in name services and `SHELL` set it opens nothing for users and hosts.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Where the host's pieces appear inside a sandbox.
pub const PREFIX: &str = "/.planwright";

/// Where each program's loader and libraries appear, in a folder named after the program.
const LIB: &str = "/.planwright/lib";

/// What glibc itself opens by soname while a program runs: the unwinder (thread
/// cancellation, `backtrace`) and, before glibc 2.34 built them in, the name services
/// [`NSSWITCH_CONF`] names. Found first in the program's library folder, they are the
/// host's (one the host lacks would be looked for in the image's folders).
const GLIBC_OPENS: &[&str] = &["libgcc_s.so.1", "libnss_files.so.2", "libnss_dns.so.2"];

/// The `/etc/nsswitch.conf` of every image root, in place of the image's: each source a
/// line names is a library `libnss_NAME.so.2` that every glibc program, planwright's carried
/// ones included, would load (found in the image's folders, or by a name with a `/` in the
/// workspace). Only the two built into glibc, which load nothing.
pub const NSSWITCH_CONF: &str = "\
# planwright's: only the sources built into glibc.
passwd: files
group: files
shadow: files
gshadow: files
initgroups: files
hosts: files dns
networks: files
protocols: files
services: files
ethers: files
rpc: files
netgroup: files
aliases: files
publickey: files
";

/// The files a program needs shown read-only, each by its path inside (the key) and on
/// the host, and the command line that starts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Carried {
    pub mounts: BTreeMap<PathBuf, PathBuf>,
    /// The program's command line before its own arguments.
    pub argv: Vec<String>,
}

/// The host program at `path` (an ELF executable, or a script whose `#!` interpreter is
/// one), brought in with what it needs. An npm-installed program brings its package folder
/// (it finds its own files beside itself); anything else brings the file alone.
pub fn program(path: &Path) -> Result<Carried> {
    let real = path
        .canonicalize()
        .with_context(|| format!("Cannot bring {} into the sandbox", path.display()))?;
    let mut carried = Carried::default();
    match Kind::of(&real)? {
        Kind::Elf => {
            let inside = carried.show(&real, "bin")?;
            carried.launch(&real, &inside)?;
        }
        Kind::Script(interpreter) => {
            let interpreter_real = interpreter
                .canonicalize()
                .with_context(|| format!("Cannot find {}", interpreter.display()))?;
            if Kind::of(&interpreter_real)? != Kind::Elf {
                bail!(
                    "Cannot bring {} into the sandbox: its interpreter {} is not an ELF \
                     executable",
                    path.display(),
                    interpreter.display()
                );
            }
            let script = carried.show(&real, "bin")?;
            let inside = carried.show(&interpreter_real, "bin")?;
            carried.launch(&interpreter_real, &inside)?;
            // node reads the `nodejs_conf` section of OpenSSL's configuration file, the
            // image's /etc/ssl/openssl.cnf, whose providers are libraries it loads: an empty
            // configuration instead (the flag also outweighs `OPENSSL_CONF`).
            let name = interpreter_real.file_name().unwrap_or_default();
            if name == "node" || name == "nodejs" {
                carried.argv.push("--openssl-config=/dev/null".into());
            }
            carried.argv.push(script);
        }
    }
    Ok(carried)
}

/// A statically linked host program, for a command that starts it by path: it appears at
/// `/.planwright/bin/NAME` (NAME as in `path`); returns that and its host path.
pub fn static_program(path: &Path) -> Result<(PathBuf, PathBuf)> {
    let real = path
        .canonicalize()
        .with_context(|| format!("Cannot bring {} into the sandbox", path.display()))?;
    let head = read_elf(&real)?.with_context(|| {
        format!(
            "Cannot bring {} into the sandbox: it is not an ELF file",
            path.display()
        )
    })?;
    if head.interp.is_some() {
        bail!(
            "Cannot bring {} into the sandbox to be started by path: it is not statically linked",
            path.display()
        );
    }
    let name = path
        .file_name()
        .context("A program path has no file name")?;
    Ok((Path::new(PREFIX).join("bin").join(name), real))
}

/// The loader and libraries of the ELF executable `elf` (a host path), for a copy of it
/// that appears inside at `inside`; a static executable needs none.
pub fn executable(elf: &Path, inside: &str) -> Result<Carried> {
    let mut carried = Carried::default();
    carried.launch(elf, inside)?;
    Ok(carried)
}

impl Carried {
    /// Adds `other`'s mounts; its command line is not this one's. One path inside for two
    /// host files is refused: either program would get the other's file.
    pub fn merge_mounts(&mut self, other: Carried) -> Result<()> {
        for (inside, host) in other.mounts {
            self.mount(inside, host)?;
        }
        Ok(())
    }

    /// Shows the host file `host` at `inside`, unless another one is shown there already.
    pub fn mount(&mut self, inside: PathBuf, host: PathBuf) -> Result<()> {
        if let Some(already) = self.mounts.get(&inside)
            && *already != host
        {
            bail!(
                "Cannot bring both {} and {} into the sandbox: they would both be {}; give \
                 one of the programs another file name",
                already.display(),
                host.display(),
                inside.display()
            );
        }
        self.mounts.insert(inside, host);
        Ok(())
    }

    /// Shows `real` (or the npm package folder holding it) under `PREFIX/section`; returns
    /// the file's path inside.
    fn show(&mut self, real: &Path, section: &str) -> Result<String> {
        let (host, inside) = match npm_package(real) {
            Some(package) => {
                let name = package.file_name().unwrap_or_default();
                let folder = Path::new(PREFIX).join("pkg").join(name);
                let inside = folder.join(real.strip_prefix(&package).unwrap_or(real));
                (package, (folder, inside))
            }
            None => {
                let inside = Path::new(PREFIX)
                    .join(section)
                    .join(real.file_name().unwrap_or_default());
                (real.to_path_buf(), (inside.clone(), inside))
            }
        };
        self.mount(inside.0, host)?;
        Ok(inside.1.display().to_string())
    }

    /// Sets the command line that starts `elf`, seen inside at `inside`, and shows its
    /// loader and libraries.
    fn launch(&mut self, elf: &Path, inside: &str) -> Result<()> {
        let head = read_elf(elf)?.with_context(|| {
            format!(
                "Cannot start {} in the sandbox: it is not an ELF file",
                elf.display()
            )
        })?;
        let Some(interp) = head.interp.clone() else {
            // Static: nothing to load.
            self.argv = vec![inside.to_owned()];
            return Ok(());
        };
        let loader = Path::new(&interp).canonicalize().with_context(|| {
            format!("Cannot find {}, the loader {} needs", interp, elf.display())
        })?;
        let loader_name = Path::new(&interp)
            .file_name()
            .context("The loader has no file name")?
            .to_owned();
        let lib = Path::new(LIB).join(
            Path::new(inside)
                .file_name()
                .context("A program inside the sandbox has no file name")?,
        );
        let loader_inside = lib.join(&loader_name);
        self.mount(loader_inside.clone(), loader)?;
        let glibc = loader_name.to_string_lossy().starts_with("ld-linux");
        let opens = if glibc { GLIBC_OPENS } else { &[] };
        for (soname, host) in libraries(elf, &head, opens)? {
            self.mount(lib.join(soname), host)?;
        }
        self.argv = vec![loader_inside.display().to_string()];
        // glibc's loader would otherwise consult the image's /etc/ld.so.cache for what the
        // program opens later; musl's has no such option (and no cache).
        if glibc {
            self.argv.push("--inhibit-cache".into());
        }
        self.argv.extend([
            "--library-path".into(),
            lib.display().to_string(),
            inside.to_owned(),
        ]);
        Ok(())
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Elf,
    /// A script, with its interpreter's host path.
    Script(PathBuf),
}

impl Kind {
    fn of(path: &Path) -> Result<Kind> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("Could not open {}", path.display()))?;
        let mut head = [0u8; 256];
        let n = read_at_most(&file, &mut head, 0)?;
        let head = &head[..n];
        if head.starts_with(b"\x7fELF") {
            return Ok(Kind::Elf);
        }
        let Some(line) = head.strip_prefix(b"#!") else {
            bail!(
                "Cannot bring {} into the sandbox: it is neither an ELF executable nor a \
                 script starting with #!",
                path.display()
            );
        };
        let line = String::from_utf8_lossy(line);
        let line = line.lines().next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let interpreter = match (words.next(), words.next()) {
            (Some(env), Some(name)) if env.ends_with("/env") => {
                find_on_path(name).with_context(|| {
                    format!(
                        "Cannot bring {} into the sandbox: its interpreter `{name}` is not \
                         installed on this host",
                        path.display()
                    )
                })?
            }
            (Some(program), _) => PathBuf::from(program),
            (None, _) => bail!("{} has an empty #! line", path.display()),
        };
        Ok(Kind::Script(interpreter))
    }
}

/// The package folder of an npm-installed file: `…/node_modules/NAME` or
/// `…/node_modules/@SCOPE/NAME`. Only such a folder is brought in whole: it holds the
/// program's own files and nothing of a user's.
fn npm_package(real: &Path) -> Option<PathBuf> {
    real.ancestors().skip(1).find_map(|dir| {
        let parent = dir.parent()?;
        let in_modules = parent.file_name()? == "node_modules"
            || (parent.file_name()?.to_string_lossy().starts_with('@')
                && parent.parent()?.file_name()? == "node_modules");
        (in_modules && dir.join("package.json").is_file()).then(|| dir.to_path_buf())
    })
}

/// What the dynamic linker needs to know of an ELF file.
#[derive(Debug, Default)]
struct ElfHead {
    machine: u16,
    interp: Option<String>,
    needed: Vec<String>,
    runpath: Vec<String>,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

/// Reads the program headers and the dynamic section of a 64-bit little-endian ELF file
/// (the only kind planwright's hosts run); `None` if `path` is not ELF at all.
fn read_elf(path: &Path) -> Result<Option<ElfHead>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("Could not open {}", path.display()))?;
    let mut header = [0u8; 64];
    if read_at_most(&file, &mut header, 0)? < 64 || !header.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    if header[4] != 2 || header[5] != 1 {
        bail!("{} is not a 64-bit little-endian ELF file", path.display());
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u64_at =
        |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let mut head = ElfHead {
        machine: u16_at(&header, 18),
        ..ElfHead::default()
    };
    let (phoff, phentsize, phnum) = (
        u64_at(&header, 32),
        usize::from(u16_at(&header, 54)),
        usize::from(u16_at(&header, 56)),
    );
    if phentsize < 56 {
        bail!("{} has malformed program headers", path.display());
    }
    let mut table = vec![0u8; phentsize * phnum];
    file.read_exact_at(&mut table, phoff)
        .with_context(|| format!("Could not read the program headers of {}", path.display()))?;
    let mut loads = Vec::new();
    let mut dynamic = None;
    for ph in table.chunks_exact(phentsize) {
        let kind = u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]);
        let (offset, vaddr, size) = (u64_at(ph, 8), u64_at(ph, 16), u64_at(ph, 32));
        match kind {
            PT_LOAD => loads.push((vaddr, offset, size)),
            PT_DYNAMIC => dynamic = Some((offset, size)),
            PT_INTERP => {
                let bytes = read_bounded(&file, offset, size, path)?;
                head.interp = Some(c_string(&bytes, 0));
            }
            _ => {}
        }
    }
    let Some((offset, size)) = dynamic else {
        return Ok(Some(head));
    };
    let entries = read_bounded(&file, offset, size, path)?;
    let mut tags = Vec::new();
    let (mut strtab, mut strsz) = (None, 0);
    for entry in entries.chunks_exact(16) {
        let (tag, value) = (u64_at(entry, 0), u64_at(entry, 8));
        match tag {
            0 => break,
            DT_STRTAB => strtab = Some(value),
            DT_STRSZ => strsz = value,
            DT_NEEDED | DT_RPATH | DT_RUNPATH => tags.push((tag, value)),
            _ => {}
        }
    }
    let Some(strtab) = strtab else {
        return Ok(Some(head));
    };
    // The string table is named by its address once loaded; the segment holding that
    // address says where it is in the file.
    let file_offset = loads
        .iter()
        .find(|(vaddr, _, size)| (*vaddr..vaddr + size).contains(&strtab))
        .map(|(vaddr, offset, _)| strtab - vaddr + offset)
        .with_context(|| format!("{} has a string table outside its segments", path.display()))?;
    let strings = read_bounded(&file, file_offset, strsz, path)?;
    let (mut rpath, mut runpath) = (Vec::new(), Vec::new());
    for (tag, at) in tags {
        let text = c_string(&strings, at as usize);
        match tag {
            DT_NEEDED => head.needed.push(text),
            DT_RPATH => rpath.extend(text.split(':').map(str::to_owned)),
            _ => runpath.extend(text.split(':').map(str::to_owned)),
        }
    }
    // As the dynamic linker does: RPATH counts only where there is no RUNPATH.
    head.runpath = if runpath.is_empty() { rpath } else { runpath };
    Ok(Some(head))
}

/// The shared libraries `elf` loads, directly or through others, as (soname, host path),
/// found the way the host's dynamic linker finds them; and those of `optional` the host has,
/// with what they need.
fn libraries(elf: &Path, head: &ElfHead, optional: &[&str]) -> Result<BTreeMap<String, PathBuf>> {
    let cache = ld_so_cache();
    let mut found = BTreeMap::new();
    let mut pending: Vec<(String, PathBuf, Vec<String>)> = head
        .needed
        .iter()
        .map(|n| (n.clone(), elf.to_path_buf(), head.runpath.clone()))
        .collect();
    let mut optional: Vec<&str> = optional.to_vec();
    loop {
        let Some((soname, needed_by, runpath)) = pending.pop() else {
            // The optional ones once every needed one is found; each the host has comes
            // with what it needs in turn.
            let Some(soname) = optional.pop() else { break };
            if !found.contains_key(soname)
                && locate(soname, elf, &head.runpath, head.machine, &cache)?.is_some()
            {
                pending.push((soname.to_owned(), elf.to_path_buf(), head.runpath.clone()));
            }
            continue;
        };
        if found.contains_key(&soname) {
            continue;
        }
        let path =
            locate(&soname, &needed_by, &runpath, head.machine, &cache)?.with_context(|| {
                format!(
                    "Cannot bring {} into the sandbox: {} needs {soname}, which is not \
                     installed on this host",
                    elf.display(),
                    needed_by.display()
                )
            })?;
        let lib = read_elf(&path)?.unwrap_or_default();
        for next in lib.needed {
            pending.push((next, path.clone(), lib.runpath.clone()));
        }
        found.insert(soname, path);
    }
    Ok(found)
}

/// The first candidate for `soname` that is an ELF file for `machine`: the needing
/// object's run path, `/etc/ld.so.cache`, then the system's default folders.
fn locate(
    soname: &str,
    needed_by: &Path,
    runpath: &[String],
    machine: u16,
    cache: &[(String, PathBuf)],
) -> Result<Option<PathBuf>> {
    if soname.contains('/') {
        return Ok(Path::new(soname).canonicalize().ok());
    }
    let origin = needed_by.parent().unwrap_or(Path::new("/"));
    let arch = format!("{}-linux-gnu", std::env::consts::ARCH);
    let defaults = [
        format!("/lib/{arch}"),
        format!("/usr/lib/{arch}"),
        "/lib64".into(),
        "/usr/lib64".into(),
        "/lib".into(),
        "/usr/lib".into(),
    ];
    let candidates = runpath
        .iter()
        .map(|dir| {
            PathBuf::from(
                dir.replace("${ORIGIN}", &origin.to_string_lossy())
                    .replace("$ORIGIN", &origin.to_string_lossy()),
            )
            .join(soname)
        })
        .chain(
            cache
                .iter()
                .filter(|(key, _)| key == soname)
                .map(|(_, p)| p.clone()),
        )
        .chain(defaults.iter().map(|dir| Path::new(dir).join(soname)));
    for candidate in candidates {
        let Ok(real) = candidate.canonicalize() else {
            continue;
        };
        if matches!(read_elf(&real), Ok(Some(lib)) if lib.machine == machine) {
            return Ok(Some(real));
        }
    }
    Ok(None)
}

/// The (soname, path) entries of the host's `/etc/ld.so.cache` in glibc's current format
/// (`glibc-ld.so.cache1.1`); empty when it is missing or in another format, and then the
/// default folders are searched.
fn ld_so_cache() -> Vec<(String, PathBuf)> {
    const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    const HEADER: usize = 48;
    const ENTRY: usize = 24;
    let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
        return Vec::new();
    };
    if !bytes.starts_with(MAGIC) || bytes.len() < HEADER {
        return Vec::new();
    }
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let count = u32_at(20).unwrap_or(0);
    (0..count)
        .filter_map(|i| {
            let at = HEADER + i * ENTRY;
            let (key, value) = (u32_at(at + 4)?, u32_at(at + 8)?);
            if key >= bytes.len() || value >= bytes.len() {
                return None;
            }
            Some((
                c_string(&bytes, key),
                PathBuf::from(c_string(&bytes, value)),
            ))
        })
        .collect()
}

/// A section of `file`, refusing sizes no real program has.
fn read_bounded(file: &std::fs::File, offset: u64, size: u64, path: &Path) -> Result<Vec<u8>> {
    if size > 16 << 20 {
        bail!("{} has an implausibly large ELF section", path.display());
    }
    let mut bytes = vec![0u8; size as usize];
    file.read_exact_at(&mut bytes, offset)
        .with_context(|| format!("Could not read {}", path.display()))?;
    Ok(bytes)
}

fn read_at_most(file: &std::fs::File, buf: &mut [u8], offset: u64) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("Could not read a program"),
        }
    }
    Ok(n)
}

/// The NUL-terminated string at `at` in `bytes`.
fn c_string(bytes: &[u8], at: usize) -> String {
    let tail = bytes.get(at..).unwrap_or_default();
    let end = tail.iter().position(|b| *b == 0).unwrap_or(tail.len());
    String::from_utf8_lossy(&tail[..end]).into_owned()
}

/// The first file called `name` in a folder of `PATH` (the usual folders when it is
/// unset).
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_brings_its_loader_and_every_library_it_needs() {
        let carried = executable(Path::new("/usr/bin/git"), "/.planwright/bin/git").unwrap();
        assert!(
            carried.argv[0].starts_with("/.planwright/lib/git/ld-linux"),
            "{carried:?}"
        );
        assert_eq!(carried.argv.last().unwrap(), "/.planwright/bin/git");
        let inside: Vec<String> = carried
            .mounts
            .keys()
            .map(|p| p.display().to_string())
            .collect();
        // libc through git's own needs, and what libc itself needs in turn.
        assert!(
            inside.contains(&"/.planwright/lib/git/libc.so.6".to_owned()),
            "{inside:?}"
        );
        assert!(
            inside.contains(&"/.planwright/lib/git/libz.so.1".to_owned()),
            "{inside:?}"
        );
        for host in carried.mounts.values() {
            assert!(host.is_file(), "{}", host.display());
            assert!(!host.starts_with("/etc"), "{}", host.display());
        }
    }

    #[test]
    fn a_static_program_starts_as_it_is() {
        let carried = executable(Path::new("/bin/busybox"), "/.planwright/bin/busybox").unwrap();
        assert_eq!(carried.argv, ["/.planwright/bin/busybox"]);
        assert!(carried.mounts.is_empty());
    }

    #[test]
    fn only_a_static_program_can_be_started_by_path() {
        let (inside, host) = static_program(Path::new("/bin/busybox")).unwrap();
        assert_eq!(inside, Path::new("/.planwright/bin/busybox"));
        assert!(host.is_file());
        let err = static_program(Path::new("/usr/bin/git"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not statically linked"), "{err}");
    }

    #[test]
    fn a_script_starts_through_its_interpreter_and_a_data_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("tool");
        std::fs::write(&script, "#!/usr/bin/env sh\necho hi\n").unwrap();
        let carried = program(&script).unwrap();
        let n = carried.argv.len();
        assert_eq!(carried.argv[n - 1], "/.planwright/bin/tool");
        assert!(
            carried.argv[n - 2].starts_with("/.planwright/bin/"),
            "{carried:?}"
        );
        let data = dir.path().join("notes");
        std::fs::write(&data, "plain text").unwrap();
        let err = program(&data).unwrap_err().to_string();
        assert!(
            err.contains("neither an ELF executable nor a script"),
            "{err}"
        );
    }

    #[test]
    fn an_npm_package_comes_in_whole_and_nothing_above_it() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("lib/node_modules/@acme/cli");
        std::fs::create_dir_all(package.join("bin")).unwrap();
        std::fs::write(dir.path().join("lib/package.json"), "{}").unwrap();
        std::fs::write(package.join("package.json"), "{}").unwrap();
        std::fs::write(package.join("bin/cli.js"), "#!/usr/bin/env sh\n").unwrap();
        let carried = program(&package.join("bin/cli.js")).unwrap();
        assert_eq!(
            carried.argv.last().unwrap(),
            "/.planwright/pkg/cli/bin/cli.js"
        );
        assert_eq!(
            carried.mounts.get(Path::new("/.planwright/pkg/cli")),
            Some(&package.canonicalize().unwrap())
        );
    }

    /// Compiles `source` with the host's C compiler into `out`.
    fn cc(args: &[&str], source: &str, out: &Path) {
        let c = out.with_extension("c");
        std::fs::write(&c, source).unwrap();
        let status = std::process::Command::new("cc")
            .arg("-o")
            .arg(out)
            .arg(&c)
            .args(args)
            .status()
            .expect("cc (gcc) is needed to build the test programs: apt-get install gcc");
        assert!(status.success(), "cc failed for {}", out.display());
    }

    /// Two programs, each linked against its own library of one soname (as the relay and
    /// a CLI can be): each gets its own file, in a folder of its own.
    #[test]
    fn two_programs_needing_two_libraries_of_one_soname_each_get_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut carried = Carried::default();
        let mut launches = Vec::new();
        for (name, value) in [("one", 1), ("two", 2)] {
            let folder = dir.path().join(name);
            std::fs::create_dir(&folder).unwrap();
            let lib = folder.join("libtwin.so.1");
            cc(
                &["-shared", "-fPIC", "-Wl,-soname,libtwin.so.1"],
                &format!("int twin(void) {{ return {value}; }}\n"),
                &lib,
            );
            let program = folder.join(name);
            let link = folder.display().to_string();
            cc(
                &[
                    &format!("-L{link}"),
                    &format!("-Wl,-rpath,{link}"),
                    "-l:libtwin.so.1",
                ],
                "int twin(void); int main(void) { return twin(); }\n",
                &program,
            );
            let one = executable(&program, &format!("/.planwright/bin/{name}")).unwrap();
            launches.push((one.argv.clone(), lib.canonicalize().unwrap()));
            carried.merge_mounts(one).unwrap();
        }
        for (argv, lib) in launches {
            let at = argv.iter().position(|a| a == "--library-path").unwrap();
            let folder = Path::new(&argv[at + 1]);
            assert_eq!(
                carried.mounts.get(&folder.join("libtwin.so.1")),
                Some(&lib),
                "{argv:?}"
            );
        }
    }

    #[test]
    fn two_host_files_at_one_path_inside_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut carried = Carried::default();
        for name in ["a", "b"] {
            let folder = dir.path().join(name);
            std::fs::create_dir(&folder).unwrap();
            std::fs::write(folder.join("tool"), "#!/bin/sh\n").unwrap();
            let one = program(&folder.join("tool")).unwrap();
            let merged = carried.merge_mounts(one);
            if name == "b" {
                let err = merged.unwrap_err().to_string();
                assert!(
                    err.contains("they would both be /.planwright/bin/tool"),
                    "{err}"
                );
            }
        }
    }
}
