//! The environment a session's steps run in: the image chosen at planning, pulled and
//! leased for as long as a step uses it, and what its status comment and pull request say
//! about it.

use crate::app::App;
use crate::config::environment::{Choice, HOST_NOTE};
use crate::environment::PullErrorKind;
use crate::environment::cache::Lease;
use crate::ids::image::ImageRef;

use super::comments;
use super::error::Stop;

/// The chosen image, pulled and leased; `None` on the host. A transient failure (a
/// timeout, a 5xx) goes back to the job queue unless `last_try`, when it is said as any
/// other failure is: the session does not end on a vaguer reason than the registry gave.
pub(super) async fn pull(
    app: &App,
    choice: &Choice,
    last_try: bool,
) -> Result<Option<Lease>, Stop> {
    let Some(reference) = choice.pinned() else {
        return Ok(None);
    };
    // Said before anything is pulled or paid: only bubblewrap can show an image as `/`.
    if app.sandbox.as_ref().is_none_or(|s| s.name() != "bwrap") {
        return Err(Stop::fail(comments::image_needs_bwrap(choice)));
    }
    let image = ImageRef::parse(&reference).map_err(|e| {
        Stop::fail(format!(
            "The environment image `{}` cannot be used: {e}.",
            reference.replace('`', "'")
        ))
    })?;
    match app.environments.pull(&image).await {
        Ok(lease) => Ok(Some(lease)),
        Err(e) if e.is_transient() && !last_try => Err(Stop::retryable(e)),
        Err(e) if e.kind == PullErrorKind::Local => {
            Err(Stop::hidden(comments::image_cache_failed(), e))
        }
        // The registry's answer stays with the operator: the log and the audit detail.
        Err(e) => {
            tracing::warn!(image = %e.image, kind = ?e.kind, error = %e, "could not pull an environment image");
            Err(Stop::hidden(comments::image_unusable(choice, &e), e))
        }
    }
}

/// What a run's records keep of its environment: `reference@digest`, or `host`.
pub(super) fn recorded(choice: &Choice, image: Option<&Lease>) -> String {
    match (choice.image.as_deref(), image) {
        (Some(reference), Some(lease)) => {
            let name = reference
                .split_once('@')
                .map_or(reference, |(name, _)| name);
            format!("{name}@{}", lease.digest)
        }
        _ => "host".to_owned(),
    }
}

/// The line the pull request's verification section opens with: where its results came
/// from, by digest, so the run can be reproduced.
pub(super) fn ran_in(choice: &Choice, recorded: Option<&str>) -> String {
    match recorded {
        Some(text) if text != "host" => {
            let digest = text.rsplit_once('@').map_or(text, |(_, d)| d);
            let reference = choice.image.as_deref().unwrap_or(text);
            format!(
                "Ran in the image `{}` (`{digest}`), from {}.",
                reference.replace('`', "'"),
                choice.from_where()
            )
        }
        _ => HOST_NOTE.to_owned(),
    }
}
