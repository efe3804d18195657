//! Maven Surefire: `-Dtest=Class#method+other,Class2#method`, with modules that hold
//! none of them allowed to run nothing.

use super::words::program_at;

pub(super) fn select(words: &[String], ids: &[&str]) -> Option<Vec<String>> {
    let mvn = program_at(words, "mvn").or_else(|| program_at(words, "mvnw"))?;
    // Ids are `SimpleClass.method`; anything else would be read as a Surefire pattern.
    let mut classes: Vec<(&str, Vec<&str>)> = Vec::new();
    for id in ids {
        let (class, method) = id.rsplit_once('.')?;
        let java = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == '.')
        };
        if !java(class) || !java(method) || method.contains('.') {
            return None;
        }
        match classes.iter_mut().find(|(c, _)| *c == class) {
            Some((_, methods)) => methods.push(method),
            None => classes.push((class, vec![method])),
        }
    }
    let spec = classes
        .iter()
        .map(|(class, methods)| format!("{class}#{}", methods.join("+")))
        .collect::<Vec<_>>()
        .join(",");
    let mut out: Vec<String> = words[..=mvn].to_vec();
    out.extend(
        words[mvn + 1..]
            .iter()
            .filter(|w| !w.starts_with("-Dtest=") && !w.starts_with("-Dsurefire.failIfNo"))
            .cloned(),
    );
    out.push(format!("-Dtest={spec}"));
    out.push("-Dsurefire.failIfNoSpecifiedTests=false".into());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::select;
    use super::super::tests::HOSTILE;

    #[test]
    fn maven_names_classes_and_methods() {
        assert_eq!(
            select(
                "mvn -B -Dtest=Old test",
                &[
                    "LedgerTest.parseCents",
                    "LedgerTest.balance",
                    "CartTest.total"
                ]
            )
            .unwrap(),
            "mvn -B test '-Dtest=LedgerTest#parseCents+balance,CartTest#total' -Dsurefire.failIfNoSpecifiedTests=false"
        );
        for id in HOSTILE {
            assert_eq!(select("mvn test", &[id]), None, "{id}");
        }
        assert_eq!(select("./mvnw test", &["noclass"]), None);
    }
}
