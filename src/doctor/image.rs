//! `planwright doctor`'s environment checks: the deployment's `ENVIRONMENT_IMAGE` pulled
//! into DATA_DIR's image cache as a run would pull it, or, without one, a warning that runs
//! of repositories naming no image use the planwright host's tools; and a warning for each
//! registry credential that lends itself to every image on its host.

use super::check::Check;
use crate::config::Settings;
use crate::environment::Environments;

const NAME: &str = "environment";

pub(super) async fn checks(settings: &Settings) -> Vec<Check> {
    let mut out = vec![default_image(settings).await];
    out.extend(
        settings
            .images
            .credentials
            .host_wide_warnings()
            .into_iter()
            .map(|warning| Check::warn("registry auth", warning)),
    );
    out
}

async fn default_image(settings: &Settings) -> Check {
    let Some(image) = &settings.images.default_image else {
        return Check::warn(
            NAME,
            "ENVIRONMENT_IMAGE is not set: runs of repositories that name no image \
             (`environment.image` or a devcontainer) use the planwright host's tools; set it \
             to the image with the toolchains they need",
        );
    };
    // Runs refuse every image then, before pulling it.
    if settings.sandbox != "bwrap" {
        return Check::fail(
            NAME,
            format!(
                "ENVIRONMENT_IMAGE {image} cannot be used with SANDBOX={}: only the bwrap \
                 sandbox shows an image as a run's root, so every run that uses it is \
                 refused; set SANDBOX=bwrap, or unset ENVIRONMENT_IMAGE",
                settings.sandbox
            ),
        );
    }
    let environments = match Environments::new(&settings.data_dir, &settings.images) {
        Ok(environments) => environments,
        Err(e) => return Check::fail(NAME, format!("ENVIRONMENT_IMAGE {image}: {e:#}")),
    };
    // Pulled for real, so the first run finds it unpacked and a refusal shows here first.
    match environments.pull(image).await {
        Ok(lease) => Check::ok(
            NAME,
            format!(
                "ENVIRONMENT_IMAGE {image} is {}, {:.1} MiB unpacked ({}) in {}",
                lease.digest,
                lease.size as f64 / f64::from(1 << 20),
                if lease.unpacked() {
                    "pulled now"
                } else {
                    "already in the cache"
                },
                settings.data_dir.join("environments").display()
            ),
        ),
        Err(e) => Check::fail(NAME, format!("ENVIRONMENT_IMAGE: {e}")),
    }
}
