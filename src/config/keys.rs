//! Every deployment setting's key, written once: the settings file's shape (a key it does
//! not know is refused at its line), the environment variable that overrides each key,
//! and the list of keys with their defaults and meanings that documentation is made from.
//! Values stay text here; `load` checks and types them.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer};

pub const ENV_PREFIX: &str = "PLANWRIGHT_";
/// The shortest token an operator may choose for a page planwright guards.
const MIN_TOKEN_CHARS: usize = 16;

/// Keys that may also be given without the `PLANWRIGHT_` prefix, as model tools expect.
const UNPREFIXED: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
];

/// One setting as an operator reads about it: its key in the settings file, what it is
/// when left unset, and what it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key in the settings file; upper-cased after `PLANWRIGHT_` in the environment.
    pub key: &'static str,
    /// The value when unset, as a person reads it; empty when unset means none.
    pub default: &'static str,
    /// What the setting is for, in one line.
    pub doc: &'static str,
}

impl Key {
    /// The environment variable that overrides the file's value.
    pub fn env(&self) -> String {
        format!("{ENV_PREFIX}{}", self.key.to_ascii_uppercase())
    }

    /// Whether the variable is also read without the prefix, as model tools name it.
    pub fn also_unprefixed(&self) -> bool {
        UNPREFIXED
            .iter()
            .any(|name| name.eq_ignore_ascii_case(self.key))
    }
}

/// Declares the settings file's struct, one [`Setting`] per key, and [`KEYS`] from the
/// same list, so that the two cannot differ.
macro_rules! settings_keys {
    ($($key:ident, $default:literal, $doc:literal;)*) => {
        /// The settings as the file writes them with the environment laid over them, one
        /// field per key; a key the file names that is not a field is refused.
        #[derive(Default, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub(super) struct Raw {
            $(pub(super) $key: Setting,)*
            /// Environment variables that name no setting, to be logged.
            #[serde(skip)]
            pub(super) warnings: Vec<String>,
        }

        impl Raw {
            /// Every setting with its key, in the order of [`KEYS`].
            fn fields_mut(&mut self) -> [(&'static str, &mut Setting); KEYS.len()] {
                [$((stringify!($key), &mut self.$key)),*]
            }
        }

        /// Every setting, in the order the settings reference lists them.
        pub const KEYS: &[Key] = &[$(Key {
            key: stringify!($key),
            default: $default,
            doc: $doc,
        }),*];
    };
}

settings_keys! {
    listen, "0.0.0.0:3000", "the HTTP address";
    port, "", "the port to listen on at every interface when `listen` is unset (the platform's `PORT` too)";
    data_dir, "./data", "the SQLite database, mirrors, workspaces and the GitHub App registered from the manifest";
    database_url, "sqlite://<DATA_DIR>/planwright.db", "the database: `sqlite://FILE` or `postgres://user:password@host/db`";
    public_url, "http://localhost:3000", "links in comments; the webhook and return URLs of the app manifest";
    github_app_id, "", "the GitHub App's id; unset, the app in `DATA_DIR/github-app.json` is used";
    github_private_key, "", "the GitHub App's private key, as PEM text or a path";
    github_webhook_secret, "", "GitHub's webhook secret; comma-separated, each is accepted (rotation)";
    github_api_url, "https://api.github.com", "GitHub's API (Enterprise Server: `https://HOST/api/v3`)";
    github_url, "https://github.com", "GitHub's web side, where the app is registered, links point and git fetches; follows `github_api_url` when unset";
    github_client_id, "the registered app's", "the GitHub App's OAuth client id, for signing people in to the session pages";
    github_client_secret, "the registered app's", "the GitHub App's OAuth client secret";
    gitlab_url, "", "the GitLab instance (self-managed too)";
    gitlab_token, "", "a GitLab token with `api` scope; its user is the bot";
    gitlab_client_id, "", "a GitLab OAuth application (scope `read_api`), for signing people in to the session pages";
    gitlab_client_secret, "", "the GitLab OAuth application's secret";
    gitlab_webhook_secret, "", "GitLab's webhook secret token, accepted for every project; comma-separated for rotation";
    gitlab_webhook_secrets, "", "per-project webhook secrets, `group/project=secret` comma-separated, each accepted for its own project only";
    anthropic_api_key, "", "the Anthropic API key";
    anthropic_base_url, "https://api.anthropic.com", "the Anthropic API's address";
    openai_api_key, "", "the OpenAI API key";
    openai_base_url, "https://api.openai.com/v1", "the OpenAI-compatible API's address";
    planner_model, "", "`provider:model` that plans; planning needs it";
    scout_model, "", "`provider:model` for scouts; unset, the planner's";
    executor_model, "", "`provider:model` for executors";
    escalate, "0", "1: a repository that names no ladder climbs its executor tiers low, medium, high on verified failures (`escalate: true`)";
    model_prices, "built-in list prices", "USD per million tokens per model, inline TOML or a path to a TOML file";
    model_proxy_listen, "", "a loopback address for the executors' model proxy instead of its socket";
    model_proxy_socket, "<DATA_DIR>/model-proxy.sock", "the Unix socket the executors' model proxy listens on (at most 107 bytes)";
    sandbox, "bwrap", "`bwrap`, or `none` only with `unsafe_no_sandbox`";
    unsafe_no_sandbox, "0", "1 allows running executors without a sandbox";
    sandbox_relay, "this program", "the planwright executable the sandbox runs as its model relay";
    log_format, "text", "`text` or `json`";
    webhook_body_limit, "26214400", "the largest webhook body in bytes";
    webhook_body_reads, "8", "GitHub bodies read at once before their signature is checked";
    workers, "4", "jobs other than runs one process runs at once";
    max_runs, "2", "runs one process carries out at once, in slots of their own";
    max_runs_per_installation, "", "runs of one installation at once, across every process; unset, no bound";
    job_lease_secs, "60", "how long a silent worker holds a claimed job";
    job_max_attempts, "5", "attempts before a job is dead-lettered";
    job_retry_base_ms, "5000", "the first retry delay, doubled each attempt";
    job_retry_max_secs, "900", "the longest retry delay";
    job_poll_ms, "1000", "how often an idle worker looks for jobs other processes enqueued";
    shutdown_grace_secs, "20", "how long a stopping worker waits for running jobs";
    rate_limit_wait_secs, "60", "the longest forge rate-limit wait a job sits out in place";
    workspace_keep_failed_secs, "86400", "how long a failed run's workspace is kept for inspection";
    mirror_unused_days, "30", "how long an unused repository mirror is kept; longer than failed workspaces";
    mirror_partial, "", "repositories whose mirrors are partial clones, comma-separated `owner/name` globs";
    mirror_partial_above, "", "a size (`2G`, `500M`, bytes): larger repositories get partial mirrors too";
    executor_timeout_secs, "2700", "how long one executor attempt may run, its commands included";
    setup_token, "made at start, printed in the log", "the secret the GitHub App registration page asks for (at least 16 characters)";
    admin_token, "", "the operator's token (at least 16 characters): signs in to the session pages and reads `/metrics`";
    access_check_secs, "300", "how long the session pages trust a forge's answer about what a person may read";
    map_tokens, "3000", "the repository map's budget in tokens (at least 300)";
    sparse_checkout_files, "20000", "a planning checkout of a commit with more files is sparse";
    routing_groups, "", "comma-separated `owner/name` globs (`acme/*`), each a group of repositories whose outcomes `routing: auto` reads together; unset, each reads only its own";
    metrics_token, "", "a token for `/metrics` only (at least 16 characters)";
    metrics_listen, "", "an address that serves `/metrics` alone, without a token";
    environment_image, "", "the OCI image runs use when the repository names none";
    registry_auth, "", "a Docker `config.json` whose `auths` give registry credentials";
    registry_insecure, "", "comma-separated registries that may be reached over plain HTTP";
    registry_private, "", "comma-separated registries that may be at loopback or private addresses";
    environment_cache_max, "20G", "what unpacked images may take on disk";
    setup_cache_max, "10G", "what the setup cache may take on disk";
    environment_pull_timeout, "1800", "seconds one image pull may spend talking to registries";
}

/// One key's value and where it came from, so that a bad value's error names its source.
/// No `Debug`: the value may be a secret.
#[derive(Default)]
pub(super) struct Setting {
    key: &'static str,
    given: Option<Given>,
}

enum Given {
    /// As the settings file writes it, before it is checked to be a single value.
    Written(toml::Value),
    File(String),
    Env {
        var: String,
        value: String,
    },
}

impl<'de> Deserialize<'de> for Setting {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Setting {
            key: "",
            given: Some(Given::Written(toml::Value::deserialize(d)?)),
        })
    }
}

impl Raw {
    /// The settings file's values, each key checked to be one the struct has (else the
    /// error names the key and its line) and each value to be a single one.
    pub(super) fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("Could not read the settings file {}", path.display()))?;
        // Whether it is TOML at all, before what its keys are.
        toml::from_str::<toml::Table>(&text)
            .with_context(|| format!("Could not parse the settings file {}", path.display()))?;
        let mut raw: Raw = toml::from_str(&text).map_err(|e| unknown_key(&e, &text, path))?;
        for (key, setting) in raw.fields_mut() {
            setting.key = key;
            if let Some(Given::Written(value)) = setting.given.take() {
                let text = match value {
                    toml::Value::String(s) => s,
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    other => bail!(
                        "Cannot use `{key}` in the settings file {}: expected a string, number or boolean, got {}",
                        path.display(),
                        other.type_str()
                    ),
                };
                setting.given = Some(Given::File(text));
            }
        }
        Ok(raw)
    }

    /// No settings file: every key unset.
    pub(super) fn empty() -> Self {
        let mut raw = Raw::default();
        for (key, setting) in raw.fields_mut() {
            setting.key = key;
        }
        raw
    }

    /// The setting a variable names, by its key.
    fn field(&mut self, key: &str) -> Option<&mut Setting> {
        self.fields_mut()
            .into_iter()
            .find(|(k, _)| *k == key)
            .map(|(_, setting)| setting)
    }

    /// Lays the environment over the file: `PLANWRIGHT_<KEY>` sets the key's field, the
    /// platform's `PORT` replaces the file's address, and model keys are read without the
    /// prefix too. Variables with the prefix that name no setting become warnings.
    pub(super) fn apply_env(&mut self, env: &[(String, String)]) {
        let mut listen_from_env = false;
        for (name, value) in env {
            let Some(key) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let lower = key.to_ascii_lowercase();
            match self.field(&lower) {
                Some(setting) => {
                    listen_from_env |= lower == "listen" || lower == "port";
                    setting.set_env(name, value);
                }
                None if key.starts_with("TEST_") || key == "LOG" => {}
                None => self
                    .warnings
                    .push(format!("ignoring {name}: planwright has no such setting")),
            }
        }
        // The environment overrides the file: a PORT given by the platform (and no
        // PLANWRIGHT_LISTEN/PORT) replaces the file's address.
        if !listen_from_env && let Some((_, port)) = env.iter().find(|(n, _)| n == "PORT") {
            self.listen.given = None;
            self.port.set_env("PORT", port);
        }
        // Unprefixed model keys apply only where the prefixed form is absent.
        for unprefixed in UNPREFIXED {
            let prefixed = format!("{ENV_PREFIX}{unprefixed}");
            if env.iter().any(|(n, _)| *n == prefixed) {
                continue;
            }
            if let Some((_, v)) = env.iter().find(|(n, _)| n == unprefixed)
                && let Some(setting) = self.field(&unprefixed.to_ascii_lowercase())
                && setting.given.is_none()
            {
                setting.set_env(unprefixed, v);
            }
        }
    }
}

/// The error for a key the settings file's struct lacks: the key, its line, and the keys
/// there are. Every value is accepted at this stage, so an unknown key is the only thing
/// deserializing parsed TOML can refuse.
fn unknown_key(e: &toml::de::Error, text: &str, path: &Path) -> anyhow::Error {
    let written = e
        .span()
        .filter(|_| e.message().starts_with("unknown field"))
        .and_then(|span| Some((text.get(span.clone())?, span.start)));
    let Some((key, start)) = written else {
        return anyhow!("{e}").context(format!(
            "Could not parse the settings file {}",
            path.display()
        ));
    };
    let line = text[..start].matches('\n').count() + 1;
    anyhow!(
        "Cannot use the settings file {}: unknown key `{}` at line {line} (known keys: {})",
        path.display(),
        key.trim_matches(['"', '\'']),
        KEYS.iter().map(|k| k.key).collect::<Vec<_>>().join(", ")
    )
}

impl Setting {
    fn set_env(&mut self, var: &str, value: &str) {
        self.given = Some(Given::Env {
            var: var.to_owned(),
            value: value.to_owned(),
        });
    }

    /// Sets the value as the settings file would, unless the file or the environment did.
    pub(super) fn default_to(&mut self, value: String) {
        self.given.get_or_insert(Given::File(value));
    }

    fn value(&self) -> Option<&str> {
        match self.given.as_ref()? {
            Given::File(value) | Given::Env { value, .. } => Some(value),
            Given::Written(_) => None,
        }
    }

    /// The value, trimmed; `None` when unset or empty.
    pub(super) fn text(&self) -> Option<&str> {
        self.value().map(str::trim).filter(|v| !v.is_empty())
    }

    /// Where the value came from, for an error: the file's key or the variable.
    pub(super) fn source(&self) -> String {
        match &self.given {
            Some(Given::Env { var, .. }) => format!("the environment variable {var}"),
            Some(_) => format!("`{}` in the settings file", self.key),
            None => format!("`{}`", self.key),
        }
    }

    /// The value parsed as a `T`, described as `what` when it is not one.
    pub(super) fn parsed<T: std::str::FromStr>(&self, what: &str) -> Result<Option<T>> {
        let Some(value) = self.text() else {
            return Ok(None);
        };
        match value.parse::<T>() {
            Ok(v) => Ok(Some(v)),
            Err(_) => bail!(
                "Cannot use {}: expected {what}, got `{value}`",
                self.source()
            ),
        }
    }

    pub(super) fn positive(&self) -> Result<Option<u64>> {
        match self.parsed::<u64>("a positive integer")? {
            Some(0) => bail!(
                "Cannot use {}: expected a positive integer, got `0`",
                self.source()
            ),
            other => Ok(other),
        }
    }

    pub(super) fn secret(&self) -> Option<SecretString> {
        self.text().map(|v| SecretString::from(v.to_owned()))
    }

    /// A comma-separated list, each item trimmed, empty ones left out.
    pub(super) fn list(&self) -> Vec<String> {
        self.text()
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Comma-separated secrets, every one accepted (while one is being rotated).
    pub(super) fn secrets(&self) -> Vec<SecretString> {
        self.list().into_iter().map(SecretString::from).collect()
    }

    /// An operator's secret that guards a page: long enough that guessing it online is
    /// hopeless.
    pub(super) fn token(&self) -> Result<Option<SecretString>> {
        let token = self.secret();
        if let Some(token) = &token
            && token.expose_secret().chars().count() < MIN_TOKEN_CHARS
        {
            bail!(
                "Cannot use {}: a token must be at least {MIN_TOKEN_CHARS} characters long, so that it cannot be guessed (`openssl rand -hex 16` makes one)",
                self.source()
            );
        }
        Ok(token)
    }

    /// `group/project=secret` pairs, comma-separated. The error never repeats an entry:
    /// it holds a secret.
    pub(super) fn project_secrets(&self) -> Result<Vec<(crate::ids::RepoName, SecretString)>> {
        let Some(text) = self.text() else {
            return Ok(Vec::new());
        };
        let mut pairs = Vec::new();
        for (n, entry) in text.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            let pair = entry.split_once('=').and_then(|(path, secret)| {
                let secret = secret.trim();
                let path = crate::ids::RepoName::parse(path).ok()?;
                (!secret.is_empty()).then(|| (path, SecretString::from(secret.to_owned())))
            });
            match pair {
                Some(pair) => pairs.push(pair),
                None => bail!(
                    "Cannot use {}: entry {} is not `group/project=secret`; list each project's path and its webhook secret, comma-separated",
                    self.source(),
                    n + 1
                ),
            }
        }
        Ok(pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field names serde's derive gives the file's struct, asked of the derive itself.
    fn file_fields() -> &'static [&'static str] {
        use serde::de::{self, Visitor};
        struct Fields(&'static [&'static str]);
        impl<'de> Deserializer<'de> for &mut Fields {
            type Error = de::value::Error;
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _name: &'static str,
                fields: &'static [&'static str],
                _visitor: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = fields;
                Err(de::Error::custom("only the field names were asked for"))
            }
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("not a struct"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                enum identifier ignored_any
            }
        }
        let mut fields = Fields(&[]);
        let _ = Raw::deserialize(&mut fields);
        fields.0
    }

    fn write(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("planwright.toml");
        std::fs::write(&file, text).unwrap();
        (dir, file)
    }

    fn refused(text: &str) -> String {
        let (_dir, file) = write(text);
        match Raw::from_file(&file) {
            Ok(_) => panic!("accepted {text:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn the_key_list_is_the_file_struct() {
        let listed: Vec<&str> = KEYS.iter().map(|k| k.key).collect();
        assert_eq!(file_fields(), listed.as_slice());
        assert_eq!(KEYS.len(), 65);
        let by_env: Vec<String> = KEYS
            .iter()
            .filter(|k| k.also_unprefixed())
            .map(Key::env)
            .collect();
        assert_eq!(
            by_env,
            [
                "PLANWRIGHT_ANTHROPIC_API_KEY",
                "PLANWRIGHT_ANTHROPIC_BASE_URL",
                "PLANWRIGHT_OPENAI_API_KEY",
                "PLANWRIGHT_OPENAI_BASE_URL"
            ]
        );
    }

    #[test]
    fn every_listed_key_round_trips_through_the_file_and_the_environment() {
        let text: String = KEYS
            .iter()
            .map(|k| format!("{} = \"file {}\"\n", k.key, k.key))
            .collect();
        let (_dir, file) = write(&text);
        let mut raw = Raw::from_file(&file).unwrap();
        for (key, setting) in raw.fields_mut() {
            assert_eq!(setting.text(), Some(format!("file {key}").as_str()));
            assert_eq!(setting.source(), format!("`{key}` in the settings file"));
        }
        for k in KEYS {
            let mut raw = Raw::from_file(&file).unwrap();
            raw.apply_env(&[(k.env(), "from the environment".to_owned())]);
            assert!(raw.warnings.is_empty(), "{:?}", raw.warnings);
            for (key, setting) in raw.fields_mut() {
                if key == k.key {
                    assert_eq!(setting.text(), Some("from the environment"));
                    assert_eq!(
                        setting.source(),
                        format!("the environment variable {}", k.env())
                    );
                } else {
                    assert_eq!(setting.text(), Some(format!("file {key}").as_str()));
                }
            }
        }
    }

    #[test]
    fn numbers_and_booleans_in_the_file_are_read_as_written() {
        let (_dir, file) = write("workers = 3\nunsafe_no_sandbox = true\nlisten = \"\"\n");
        let raw = Raw::from_file(&file).unwrap();
        assert_eq!(raw.workers.text(), Some("3"));
        assert_eq!(raw.unsafe_no_sandbox.text(), Some("true"));
        assert_eq!(raw.listen.text(), None, "empty means unset");
        assert_eq!(raw.port.text(), None);
        assert_eq!(raw.port.source(), "`port`");
    }

    #[test]
    fn an_unknown_key_is_refused_at_its_line_with_the_keys_there_are() {
        let e = refused("listen = \"127.0.0.1:4000\"\n\nworkres = 2\n");
        assert!(
            e.starts_with("Cannot use the settings file ")
                && e.contains("planwright.toml: unknown key `workres` at line 3 (known keys: listen, port, data_dir,"),
            "{e}"
        );
        let e = refused("# a comment\n\"listne\" = \"127.0.0.1:4000\"\n");
        assert!(e.contains("unknown key `listne` at line 2"), "{e}");
        let e = refused("workers = 2\n[github]\napp_id = 5\n");
        assert!(e.contains("unknown key `github` at line 2"), "{e}");
        // A value that is not one is named with its key, as a file that is not TOML is.
        let e = refused("workers = 2\nlisten = [\"127.0.0.1:4000\"]\n");
        assert!(
            e.starts_with("Cannot use `listen` in the settings file ")
                && e.ends_with(": expected a string, number or boolean, got array"),
            "{e}"
        );
        let e = refused("workers = = 2\n");
        assert!(e.starts_with("Could not parse the settings file "), "{e}");
    }

    #[test]
    fn unknown_variables_are_warned_of_and_the_platform_port_replaces_the_address() {
        let (_dir, file) = write("listen = \"127.0.0.1:4000\"\n");
        let mut raw = Raw::from_file(&file).unwrap();
        raw.apply_env(&[
            ("PLANWRIGHT_WORKRES".to_owned(), "2".to_owned()),
            ("PLANWRIGHT_TEST_ONLY".to_owned(), "1".to_owned()),
            ("PORT".to_owned(), "8080".to_owned()),
            ("OPENAI_API_KEY".to_owned(), "k".to_owned()),
        ]);
        assert_eq!(
            raw.warnings,
            ["ignoring PLANWRIGHT_WORKRES: planwright has no such setting"]
        );
        assert_eq!(raw.listen.text(), None);
        assert_eq!(raw.port.text(), Some("8080"));
        assert_eq!(raw.port.source(), "the environment variable PORT");
        assert_eq!(
            raw.openai_api_key.source(),
            "the environment variable OPENAI_API_KEY"
        );
    }
}
