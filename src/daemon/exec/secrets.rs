//! The environment variables a child must not inherit: every one leaderd read a secret from
//! (`LEADERD_REDIS_PASSWORD`, `LEADERD_REDIS_URL`, and any variable whose value holds the
//! password, such as one named by `${VAR}` in a URL). Real isolation needs another uid.

use std::ffi::OsString;
use std::sync::OnceLock;

use crate::daemon::config::Config;

static SECRET_VARS: OnceLock<Vec<OsString>> = OnceLock::new();

/// Variables that always go: they may carry the password.
const ALWAYS: [&str; 2] = ["LEADERD_REDIS_PASSWORD", "LEADERD_REDIS_URL"];

/// Notes the secrets of `config`, once, before any child is started.
pub(crate) fn remember_secret_vars(config: &Config) {
    let _ = SECRET_VARS.set(secret_vars_of(config, std::env::vars_os()));
}

/// Removes the secret variables from `command`'s environment: the one place that decides what
/// exec mode's child, the hooks and the health check do not inherit.
pub(crate) fn without_secrets(command: &mut std::process::Command) {
    for var in secret_vars() {
        command.env_remove(var);
    }
}

/// The variables to remove from a child's environment.
fn secret_vars() -> Vec<OsString> {
    let mut vars: Vec<OsString> = ALWAYS.iter().map(OsString::from).collect();
    vars.extend(SECRET_VARS.get().into_iter().flatten().cloned());
    vars
}

/// The names among `vars` whose value contains one of the secrets of `config`.
fn secret_vars_of(
    config: &Config,
    vars: impl Iterator<Item = (OsString, OsString)>,
) -> Vec<OsString> {
    let secrets = secrets(config);
    vars.filter(|(_, value)| {
        let value = value.to_string_lossy();
        secrets.iter().any(|s| value.contains(s.as_str()))
    })
    .map(|(name, _)| name)
    .collect()
}

/// The password and every password written in a Redis URL of `config`.
fn secrets(config: &Config) -> Vec<String> {
    let r = &config.redis;
    let listed = r.urls.iter().chain(&r.sentinels).map(String::as_str);
    let urls = r.url.as_deref().into_iter().chain(listed);
    let mut secrets: Vec<String> = urls.filter_map(url_password).collect();
    secrets.extend(r.password.as_ref().map(|p| p.expose().to_string()));
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// The password in `scheme://user:password@host...`.
fn url_password(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    userinfo.split_once(':').map(|(_, p)| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_lose_the_variables_that_always_go() {
        let mut command = std::process::Command::new("true");
        without_secrets(&mut command);
        let removed: Vec<_> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_owned())
            .collect();
        assert!(ALWAYS.iter().all(|v| removed.contains(&OsString::from(v))));
    }

    #[test]
    fn passwords_in_urls_are_found() {
        assert_eq!(
            url_password("redis://u:p4ss@h:1/0").as_deref(),
            Some("p4ss")
        );
        assert_eq!(url_password("redis://:a@b@h").as_deref(), Some("a@b"));
        assert_eq!(url_password("redis://u@h"), None);
        assert_eq!(url_password("redis://h"), None);
    }
}
