//! How a command reaches a running server, the same for every command that can (`stats`,
//! `check`, `compact`, `backup`, `export` with `--url`; the `cluster` commands, which find the
//! nodes in etcd):
//!
//! - the bearer token from `--token-file` (its first line), else `SHARDLITE_AUTH_TOKEN` or
//!   `--auth-token` (which other users of the machine see in `ps`): never needed on the line;
//! - `--tls-ca` for an `https://` server whose certificate a CA of its own signed;
//! - an error that says what the server said: a refusal names the role the token lacks.

use std::path::{Path, PathBuf};

use anyhow::Context;
use reqwest::{Method, StatusCode};

/// Where a command works: a data directory no server has open (`--data`) or a running server
/// (`--url`), exactly one of them.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// A data directory no server has open.
    #[arg(long, conflicts_with = "url", required_unless_present = "url")]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub remote: Remote,
}

/// `--url` and how to talk to the server there.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Remote {
    /// A running server instead of a data directory, e.g. http://127.0.0.1:8080.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    #[command(flatten)]
    pub auth: Auth,
}

/// The token and the trust a command talks to servers with.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Reaching a server")]
pub struct Auth {
    /// A file holding the bearer token on its first line (a `ROLE TOKEN` line of a server's
    /// token file works too); wins over SHARDLITE_AUTH_TOKEN.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The bearer token; better in the variable or --token-file (`ps` shows arguments).
    #[arg(long, env = "SHARDLITE_AUTH_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub auth_token: Option<String>,
    /// With https://: also trust the CAs of this PEM file (besides the system's).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

impl Auth {
    /// The token to send, if any.
    pub fn token(&self) -> anyhow::Result<Option<String>> {
        let Some(path) = &self.token_file else { return Ok(self.auth_token.clone()) };
        let text = std::fs::read_to_string(path).with_context(|| format!("reading --token-file {}", path.display()))?;
        let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'));
        let token = line.and_then(|l| l.split_whitespace().last());
        token.map(|t| Some(t.to_owned())).with_context(|| format!("--token-file {}: no token in it", path.display()))
    }

    /// A connection to the server at `url`.
    pub fn connect(&self, url: &str) -> anyhow::Result<Connection> {
        Ok(Connection {
            base: url.trim_end_matches('/').to_owned(),
            client: client(self.tls_ca.as_deref())?,
            token: self.token()?,
            runtime: tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        })
    }
}

/// A client of running servers, `http://` or `https://` (HTTP/2 or HTTP/1.1), trusting the
/// system's roots and the CAs of the PEM file `ca`.
pub fn client(ca: Option<&Path>) -> anyhow::Result<reqwest::Client> {
    let tls = shardlite_bench::tls::client_config(ca, &[b"h2", b"http/1.1"])?;
    Ok(reqwest::Client::builder().use_preconfigured_tls(tls).build()?)
}

/// One server, asked from a command's thread.
pub struct Connection {
    base: String,
    client: reqwest::Client,
    token: Option<String>,
    runtime: tokio::runtime::Runtime,
}

impl Connection {
    /// `METHOD path` with `body`: the answer's body once it is a success, else an error saying
    /// what the server answered.
    pub fn call(&self, method: Method, path: &str, body: Option<String>) -> anyhow::Result<String> {
        self.runtime.block_on(async {
            let response = self.send(method.clone(), path, body).await?;
            response.text().await.with_context(|| format!("{method} {}{path}", self.base))
        })
    }

    /// `METHOD path`'s answer as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<T> {
        let text = self.call(method.clone(), path, body)?;
        serde_json::from_str(&text).with_context(|| format!("reading the answer of {method} {}{path}", self.base))
    }

    /// `GET path`'s successful answer, its body still to be read (through [`Connection::runtime`]).
    pub fn stream(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        self.runtime.block_on(self.send(Method::GET, path, None))
    }

    /// The runtime the answers of [`Connection::stream`] are read on.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    async fn send(&self, method: Method, path: &str, body: Option<String>) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        let response = send(&self.client, method.clone(), &url, self.token.as_deref(), body).await?;
        Ok(response)
    }
}

/// `METHOD url` with `token` and `body` through `client`: the response once it is a success,
/// else an error with what the server said (and, refused, the way to give a token).
pub async fn send(
    client: &reqwest::Client,
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Option<String>,
) -> anyhow::Result<reqwest::Response> {
    let mut request = client.request(method.clone(), url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
    }
    let response = request.send().await.with_context(|| format!("{method} {url}"))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let text = response.text().await.unwrap_or_default();
    let said = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or(text);
    let hint = match (status, token) {
        (StatusCode::UNAUTHORIZED, None) => " (give a token: --token-file FILE or SHARDLITE_AUTH_TOKEN)",
        (StatusCode::FORBIDDEN, _) => " (give a token holding that role: --token-file FILE or SHARDLITE_AUTH_TOKEN)",
        _ => "",
    };
    anyhow::bail!("{method} {url}: {status}: {said}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_gives_its_first_token_and_wins_over_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        let auth = |file: Option<&Path>| Auth {
            token_file: file.map(Path::to_owned),
            auth_token: Some("from-the-variable".into()),
            tls_ca: None,
        };
        assert_eq!(auth(None).token().unwrap().as_deref(), Some("from-the-variable"));
        for (text, token) in
            [("plain-token\n", "plain-token"), ("# mine\n\nread,metrics   r-token \nnext\n", "r-token")]
        {
            std::fs::write(&file, text).unwrap();
            assert_eq!(auth(Some(&file)).token().unwrap().as_deref(), Some(token), "{text:?}");
        }
        std::fs::write(&file, "\n# none\n").unwrap();
        assert!(auth(Some(&file)).token().unwrap_err().to_string().contains("no token in it"));
    }
}
