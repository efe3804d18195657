//! Landlock inside the sandbox, as a second wall behind bubblewrap's mounts: writes only
//! beneath the given folders, and (kernel ABI 6 and later) no signals to, or abstract
//! sockets of, processes outside the domain, such as the relay started before it.

use std::path::Path;

use anyhow::{Context, Result};
use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

/// What the running kernel enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforced {
    /// Writes confined, at this ABI version.
    Abi(ABI),
    /// The kernel has no usable Landlock (missing, disabled, or ABI 1, which would forbid
    /// every rename across folders); bubblewrap's mounts alone hold.
    Unsupported,
}

/// Confines the calling thread and everything it later starts (the relay then becomes the
/// command): files may be written, created, removed or renamed only beneath `writable`. Reading and executing are left to the
/// mounts.
pub fn restrict_writes(writable: &[&Path]) -> Result<Enforced> {
    // The write rights of ABI 3 and no later ones (ioctl on devices, connecting to named
    // sockets), so a run is confined alike on every kernel that has them; a kernel with
    // ABI 2 lacks truncation, which the crate then leaves out.
    let access = AccessFs::from_write(ABI::V3);
    let mut ruleset = Ruleset::default()
        // Without `Refer` (ABI 1) every rename across folders would fail: no ruleset then.
        .set_compatibility(CompatLevel::SoftRequirement)
        .handle_access(AccessFs::Refer)
        .and_then(|r| {
            r.set_compatibility(CompatLevel::BestEffort)
                .handle_access(access)
        })
        .and_then(|r| r.scope(Scope::from_all(ABI::V6)))
        .and_then(Ruleset::create)
        .context("Could not create a Landlock ruleset")?;
    for path in writable {
        let fd = PathFd::new(path).with_context(|| format!("Could not open {}", path.display()))?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .with_context(|| format!("Could not allow writes in {}", path.display()))?;
    }
    let status = ruleset
        .restrict_self()
        .context("Could not enforce the Landlock ruleset")?;
    Ok(match (status.ruleset, status.landlock) {
        (RulesetStatus::NotEnforced, _) => Enforced::Unsupported,
        (_, LandlockStatus::Available { effective_abi, .. }) => Enforced::Abi(effective_abi),
        (_, LandlockStatus::NotEnabled | LandlockStatus::NotImplemented) => Enforced::Unsupported,
    })
}

/// What a run's confinement would be on this kernel, learned by confining a thread made
/// for it (Landlock binds the calling thread alone, which then ends): the crate keeps its
/// ABI probe private so that rules follow features, not version numbers.
pub(crate) fn probe() -> Result<Enforced> {
    std::thread::spawn(|| restrict_writes(&[Path::new("/")]))
        .join()
        .unwrap_or_else(|_| {
            Err(anyhow::anyhow!(
                "Could not probe Landlock: the probe panicked"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confined_thread_writes_renames_and_removes_only_beneath_its_folders() {
        let inside = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("kept"), "x").unwrap();
        let (inside_path, outside_path) = (inside.path().to_owned(), outside.path().to_owned());
        std::thread::spawn(move || {
            let enforced = restrict_writes(&[&inside_path]).unwrap();
            assert!(matches!(enforced, Enforced::Abi(_)), "{enforced:?}");
            std::fs::create_dir(inside_path.join("sub")).unwrap();
            std::fs::write(inside_path.join("a"), "x").unwrap();
            std::fs::rename(inside_path.join("a"), inside_path.join("sub/b")).unwrap();
            for denied in [
                std::fs::write(outside_path.join("new"), "x"),
                std::fs::remove_file(outside_path.join("kept")),
                std::fs::rename(inside_path.join("sub/b"), outside_path.join("b")),
                std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(outside_path.join("kept"))
                    .map(drop),
            ] {
                let err = denied.unwrap_err();
                assert!(
                    matches!(
                        err.kind(),
                        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::CrossesDevices
                    ),
                    "{err}"
                );
            }
        })
        .join()
        .unwrap();
        // The thread's confinement ended with it.
        std::fs::write(outside.path().join("after"), "x").unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.path().join("kept")).unwrap(),
            "x"
        );
    }
}
