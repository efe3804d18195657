//! The name of the branch a run works on.

use crate::ids::IssueNumber;

const BRANCH_PREFIX: &str = "planwright/";

const SLUG_MAX: usize = 40;

/// The branch a run works on: `planwright/<issue>-<slug>`, the slug made of the title's
/// ASCII letters and digits, lower-cased, at most 40 characters.
pub fn branch_name(issue: IssueNumber, title: &str) -> String {
    let mut slug = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            if slug.len() == SLUG_MAX {
                break;
            }
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            if slug.len() + 1 >= SLUG_MAX {
                break;
            }
            slug.push('-');
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        format!("{BRANCH_PREFIX}{issue}")
    } else {
        format!("{BRANCH_PREFIX}{issue}-{slug}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_are_short_ascii_slugs() {
        assert_eq!(
            branch_name(IssueNumber(12), "Fix: crash when the config file is empty!"),
            "planwright/12-fix-crash-when-the-config-file-is-empty"
        );
        assert_eq!(
            branch_name(IssueNumber(3), "Ünïcode — ☃"),
            "planwright/3-n-code"
        );
        assert_eq!(branch_name(IssueNumber(4), "☃☃"), "planwright/4");
        let long = branch_name(IssueNumber(5), &"word ".repeat(30));
        let slug = long.strip_prefix("planwright/5-").unwrap();
        assert!(slug.len() <= SLUG_MAX && !slug.ends_with('-'), "{slug}");
        assert!(git2::Reference::is_valid_name(&format!(
            "refs/heads/{long}"
        )));
    }
}
