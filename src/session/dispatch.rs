//! What planwright does with each domain event once it is off the webhook path: the
//! handler of `event` jobs.

use anyhow::Context;
use tracing::info;

use crate::event::{Event, Forge, RepoEvent};
use std::sync::Arc;

use crate::app::App;
use crate::jobs::{Job, JobError};
use crate::store::{Db, audit, installations, jobs};

/// The job kind that carries one domain event from a delivery.
pub const EVENT_JOB: &str = "event";

pub async fn handle_event_job(app: Arc<App>, job: Job) -> Result<(), JobError> {
    let event: Event = serde_json::from_str(&job.payload)
        .context("Cannot read the event job's payload")
        .map_err(JobError::Permanent)?;
    if let Event::Repository(repo_event) = &event {
        // The delivery lets a retried job see what its first attempt already did.
        let delivery = jobs::get(&job.db, job.id.as_str())
            .await?
            .and_then(|row| row.delivery_id);
        return crate::session::flow::on_repo_event(&app, repo_event, delivery.as_deref()).await;
    }
    handle(&job.db, &event).await.map_err(JobError::from)
}

async fn handle(db: &Db, event: &Event) -> anyhow::Result<()> {
    match event {
        Event::Ping { hook_id } => {
            info!(?hook_id, "the forge reached planwright's webhook");
            Ok(())
        }
        Event::Installation {
            installation,
            action,
            account,
            repositories,
        } => {
            let state = match action.as_str() {
                "deleted" => "deleted",
                "suspend" => "suspended",
                _ => "active",
            };
            let mut tx = db.writer.begin().await?;
            installations::upsert(&mut tx, Forge::Github, *installation, account, state).await?;
            if action == "deleted" {
                installations::remove_repositories(&mut tx, Forge::Github, *installation, None)
                    .await?;
            } else {
                installations::add_repositories(
                    &mut tx,
                    Forge::Github,
                    *installation,
                    repositories,
                )
                .await?;
            }
            audit::append(
                &mut tx,
                &audit::Entry {
                    actor: &format!("github:{account}"),
                    action: &format!("installation.{action}"),
                    session: None,
                    delivery: None,
                    detail: serde_json::json!({ "installation": installation }),
                },
            )
            .await?;
            tx.commit().await?;
            Ok(())
        }
        Event::InstallationRepositories {
            installation,
            action,
            added,
            removed,
        } => {
            let mut tx = db.writer.begin().await?;
            installations::add_repositories(&mut tx, Forge::Github, *installation, added).await?;
            installations::remove_repositories(
                &mut tx,
                Forge::Github,
                *installation,
                Some(removed),
            )
            .await?;
            tx.commit().await?;
            info!(%installation, %action, added = added.len(), removed = removed.len(), "installation repositories changed");
            Ok(())
        }
        // Handled by the session layer before this is reached.
        Event::Repository(RepoEvent { repo, kind, .. }) => {
            info!(%repo, ?kind, "repository event");
            Ok(())
        }
    }
}
