//! A forge request's route: its method and path with the repository, numbers, commits,
//! file paths and names taken out, so requests count by what they do and the count's
//! labels stay few whatever the repositories are called.

/// Segments kept as they are; any other is a name or an id.
const WORDS: &[&str] = &[
    "access_tokens",
    "all",
    "api",
    "app",
    "award_emoji",
    "branches",
    "check-runs",
    "check-suites",
    "collaborators",
    "comments",
    "commits",
    "contents",
    "discussions",
    "events",
    "files",
    "git",
    "graphql",
    "hooks",
    "installations",
    "issues",
    "labels",
    "members",
    "merge_requests",
    "notes",
    "permission",
    "projects",
    "pulls",
    "raw",
    "reactions",
    "refs",
    "replies",
    "repos",
    "repository",
    "reviews",
    "status",
    "statuses",
    "tree",
    "trees",
    "user",
    "users",
    "v3",
    "v4",
];

/// `GET /repos/{owner}/{repo}/issues/{n}/comments` for
/// `GET /repos/acme/widgets/issues/7/comments?per_page=100`.
pub fn route(method: &str, path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let mut out: Vec<&str> = Vec::new();
    let mut parts = path.split('/').filter(|s| !s.is_empty());
    while let Some(part) = parts.next() {
        let previous = out.last().copied();
        match part {
            "repos" => {
                out.push("repos");
                if parts.next().is_some() {
                    out.push("{owner}");
                }
                if parts.next().is_some() {
                    out.push("{repo}");
                }
                continue;
            }
            "projects" => {
                out.push("projects");
                if parts.next().is_some() {
                    out.push("{project}");
                }
                continue;
            }
            _ => {}
        }
        let placeholder = match previous {
            // What follows is a path of its own, slashes and all.
            Some("contents" | "branches") => {
                out.push("{path}");
                break;
            }
            Some("files") => Some("{path}"),
            Some("commits" | "statuses") => Some("{sha}"),
            Some("collaborators" | "users") => Some("{user}"),
            _ => None,
        };
        if let Some(p) = placeholder {
            out.push(p);
        } else if part.bytes().all(|b| b.is_ascii_digit()) {
            out.push("{n}");
        } else if WORDS.contains(&part) {
            out.push(part);
        } else {
            out.push("{id}");
        }
    }
    format!("{} /{}", method.to_ascii_uppercase(), out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn names_and_numbers_leave_the_route() {
        let cases = [
            (
                "GET",
                "/repos/acme/widgets/issues/7/comments?per_page=100",
                "GET /repos/{owner}/{repo}/issues/{n}/comments",
            ),
            (
                "GET",
                "/repos/acme/widgets/contents/.github/planwright.yml?ref=main",
                "GET /repos/{owner}/{repo}/contents/{path}",
            ),
            (
                "GET",
                "/repos/acme/widgets/collaborators/maria/permission",
                "GET /repos/{owner}/{repo}/collaborators/{user}/permission",
            ),
            (
                "POST",
                "/app/installations/77/access_tokens",
                "POST /app/installations/{n}/access_tokens",
            ),
            (
                "GET",
                "/repos/acme/widgets/commits/0123abcd/check-runs",
                "GET /repos/{owner}/{repo}/commits/{sha}/check-runs",
            ),
            (
                "get",
                "/projects/acme%2Ftools%2Fwidgets/repository/files/src%2Fa.rs?ref=main",
                "GET /projects/{project}/repository/files/{path}",
            ),
            (
                "POST",
                "/projects/12/statuses/0123abcd",
                "POST /projects/{project}/statuses/{sha}",
            ),
            (
                "GET",
                "/repos/acme/widgets/branches/feature/x",
                "GET /repos/{owner}/{repo}/branches/{path}",
            ),
            ("GET", "/users?username=maria", "GET /users"),
            ("POST", "/graphql", "POST /graphql"),
            ("GET", "/something/unknown-name", "GET /{id}/{id}"),
        ];
        for (method, path, want) in cases {
            assert_eq!(route(method, path), want, "{path}");
        }
    }
}
