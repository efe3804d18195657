//! `planwright env pull REF`: fetches an environment image, verifies and unpacks it into
//! the image cache as a run would, and says where it is.

use clap::Subcommand;

use crate::config::Settings;
use crate::environment::Environments;
use crate::ids::image::ImageRef;

use super::exit::ExitStatus;

#[derive(Subcommand)]
pub(super) enum EnvCommand {
    /// Fetch, verify and unpack an image (`[registry/]name[:tag][@sha256:…]`) into
    /// DATA_DIR/environments/; prints its digest, size and root folder.
    Pull {
        /// The image reference, e.g. `ghcr.io/acme/ci:1.4` or `debian:12`.
        reference: ImageRef,
    },
}

pub(super) async fn run(settings: Settings, command: EnvCommand) -> anyhow::Result<ExitStatus> {
    let EnvCommand::Pull { reference } = command;
    let environments = Environments::new(&settings.data_dir, &settings.images)?;
    let lease = environments.pull(&reference).await?;
    let image = lease.image();
    println!("image   {}", image.reference);
    println!("digest  {}", image.digest);
    println!("size    {} ({} bytes)", human(image.size), image.size);
    println!("root    {}", image.root.display());
    println!(
        "cache   {}",
        if lease.unpacked() {
            "downloaded and unpacked now"
        } else {
            "already unpacked"
        }
    );
    Ok(ExitStatus::Success)
}

fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}
