//! Events about the app itself rather than a repository's work: a ping, and GitHub App
//! installations and the repositories they cover, recorded (with an audit entry) for the
//! repositories page.

use tracing::info;

use crate::event::{Event, ForgeKind, InstallationAction, RepoEvent};
use crate::store::audit::AuditAction;
use crate::store::installations::InstallationState;
use crate::store::{Db, audit, installations};

/// Records what an event that is not about one repository's work says: a ping, or an
/// installation (or its repositories) added, changed or removed.
pub async fn on_event(db: &Db, event: &Event) -> anyhow::Result<()> {
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
            let state = match action {
                InstallationAction::Deleted => InstallationState::Deleted,
                InstallationAction::Suspend => InstallationState::Suspended,
                _ => InstallationState::Active,
            };
            let mut tx = db.writer.begin().await?;
            installations::upsert(&mut tx, ForgeKind::Github, *installation, account, state)
                .await?;
            if *action == InstallationAction::Deleted {
                installations::remove_repositories(&mut tx, ForgeKind::Github, *installation, None)
                    .await?;
            } else {
                installations::add_repositories(
                    &mut tx,
                    ForgeKind::Github,
                    *installation,
                    repositories,
                )
                .await?;
            }
            audit::append(
                &mut tx,
                &audit::Entry {
                    actor: &format!("github:{account}"),
                    action: AuditAction::Installation(action.as_str().to_owned()),
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
            installations::add_repositories(&mut tx, ForgeKind::Github, *installation, added)
                .await?;
            installations::remove_repositories(
                &mut tx,
                ForgeKind::Github,
                *installation,
                Some(removed),
            )
            .await?;
            tx.commit().await?;
            info!(%installation, %action, added = added.len(), removed = removed.len(), "installation repositories changed");
            Ok(())
        }
        // Sessions handle these before this is reached.
        Event::Repository(RepoEvent { repo, kind, .. }) => {
            info!(%repo, ?kind, "repository event");
            Ok(())
        }
    }
}
