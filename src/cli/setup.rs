//! `planwright setup`: registers the GitHub App from its manifest through a browser and
//! says where its credentials went and how to install it.

use std::net::SocketAddr;

use crate::config::Settings;
use crate::config::github_app::RegisteredApp;
use crate::server::registration::setup_from_terminal;

use super::exit::ExitStatus;

pub(super) async fn run(
    settings: Settings,
    org: Option<String>,
    listen: SocketAddr,
) -> anyhow::Result<ExitStatus> {
    let data_dir = settings.data_dir.clone();
    let app = setup_from_terminal(settings, listen, org).await?;
    println!(
        "Registered the GitHub App {} (id {}); its credentials are in {}.",
        app.slug,
        app.id,
        RegisteredApp::path(&data_dir).display()
    );
    println!(
        "Install it on your repositories: {}/installations/new",
        app.html_url.trim_end_matches('/')
    );
    Ok(ExitStatus::Success)
}
