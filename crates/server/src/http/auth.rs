//! Bearer tokens and their roles. A token is given as `--auth-token` / `SHARDLITE_AUTH_TOKEN`
//! (one token holding every role) or in the file `--auth-token-file` names, one `ROLE TOKEN` a
//! line, re-read on [`Auth::reload`] (SIGHUP in `shardlite serve`). Each route names the role it
//! needs (`Route::role`); `/healthz` and `/readyz` need none. The `node` role is what the nodes
//! of a cluster present to each other on the routes only a node may call (a move's transfer, a
//! takeover): every node's token file holds the same `node` line, and the node sends that token
//! ([`Auth::node_token`]); no client token opens those routes.
//!
//! A request without a valid token is refused with 401 before routing, so that nothing about
//! the server is revealed; a valid token lacking the route's role gets 403. Tokens are compared
//! in constant time, every one of them for every request, so that response timing does not
//! reveal how much of a guess was right nor which token matched (a wrong length is refused at
//! once: the length is not the secret).

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use hyper::{header::AUTHORIZATION, HeaderMap};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::error::ApiError;

/// What a token may do. Each route needs one role (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// GET and HEAD of records, listing keys.
    Read,
    /// Everything on data: reads, writes, deletes, batches. Holds `read` too.
    Write,
    /// The administration routes.
    Admin,
    /// `/metrics` and `/stats`.
    Metrics,
    /// What only another node of the cluster may call: a move's transfer, a takeover.
    Node,
}

impl Role {
    /// Every role, in the order of the file format's documentation.
    pub const ALL: [Role; 5] = [Role::Read, Role::Write, Role::Admin, Role::Metrics, Role::Node];

    /// The role's name in the token file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
            Role::Metrics => "metrics",
            Role::Node => "node",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The roles holding this one grants.
    fn grants(self) -> Roles {
        match self {
            Role::Write => Roles::of(Role::Write).with(Role::Read),
            role => Roles::of(role),
        }
    }
}

/// A set of roles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Roles(u8);

impl Roles {
    fn of(role: Role) -> Self {
        Self(1 << role as u8)
    }

    fn with(self, role: Role) -> Self {
        Self(self.0 | Self::of(role).0)
    }

    /// Every role: what the `--auth-token` token holds.
    fn all() -> Self {
        Role::ALL.into_iter().fold(Self::default(), Self::with)
    }

    /// Whether `role` is in the set.
    pub fn holds(self, role: Role) -> bool {
        self.0 & Self::of(role).0 != 0
    }
}

/// The tokens a server accepts, each with its roles.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    entries: Vec<(Vec<u8>, Roles)>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a secret.
        f.debug_struct("Tokens").field("count", &self.entries.len()).finish()
    }
}

impl Tokens {
    /// One token holding every role.
    pub fn single(token: &str) -> Self {
        Self { entries: vec![(token.as_bytes().to_vec(), Roles::all())] }
    }

    /// Parses a token file: one `ROLE TOKEN` a line, where ROLE is `read`, `write`, `admin`,
    /// `metrics` or `node`, or several of them joined by commas; a token on several lines holds each
    /// line's roles. Blank lines and lines starting with `#` are skipped. The error names the
    /// line, never the token.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut tokens = Self::default();
        for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((names, token)) = line.split_once(char::is_whitespace) else {
                return Err(format!("line {number}: expected `ROLE TOKEN`"));
            };
            let mut roles = Roles::default();
            for name in names.split(',') {
                let role = Role::parse(name).ok_or_else(|| {
                    format!("line {number}: unknown role `{name}` (the roles: read, write, admin, metrics, node)")
                })?;
                roles = Roles(roles.0 | role.grants().0);
            }
            tokens.add(token.trim().as_bytes(), roles);
        }
        if tokens.entries.is_empty() {
            return Err("no token in the file".into());
        }
        Ok(tokens)
    }

    /// Reads and parses the token file at `path`.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The first token holding the `node` role: what this node presents to the others.
    fn node(&self) -> Option<String> {
        let (token, _) = self.entries.iter().find(|(_, roles)| roles.holds(Role::Node))?;
        String::from_utf8(token.clone()).ok()
    }

    fn add(&mut self, token: &[u8], roles: Roles) {
        match self.entries.iter_mut().find(|(t, _)| t == token) {
            Some((_, held)) => held.0 |= roles.0,
            None => self.entries.push((token.to_vec(), roles)),
        }
    }

    /// The roles `given` holds, if it is a token of the set. Every token is compared, in
    /// constant time.
    fn roles_of(&self, given: &[u8]) -> Option<Roles> {
        let mut found = Roles::default();
        let mut matched = subtle::Choice::from(0);
        for (token, roles) in &self.entries {
            let hit = token.ct_eq(given);
            found.0 |= u8::conditional_select(&0, &roles.0, hit);
            matched |= hit;
        }
        bool::from(matched).then_some(found)
    }
}

/// The token a node with the tokens of `source` presents to the other nodes, read now.
pub fn node_token(source: &TokenSource) -> Result<Option<String>, String> {
    Ok(Auth::new(source.clone())?.node_token())
}

/// Where the tokens come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// No token: every route is open.
    None,
    /// One token holding every role (`--auth-token`, `SHARDLITE_AUTH_TOKEN`).
    Single(String),
    /// A token file, re-read on reload.
    File(PathBuf),
}

/// The tokens in force, swapped whole when the file is re-read.
pub struct Auth {
    source: TokenSource,
    tokens: RwLock<Arc<Tokens>>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth").field("enabled", &self.enabled()).finish()
    }
}

impl Auth {
    /// The tokens of `source`, read now.
    pub fn new(source: TokenSource) -> Result<Self, String> {
        let tokens = match &source {
            TokenSource::None => Tokens::default(),
            TokenSource::Single(token) => Tokens::single(token),
            TokenSource::File(path) => Tokens::read(path)?,
        };
        Ok(Self { source, tokens: RwLock::new(Arc::new(tokens)) })
    }

    /// Whether a token is required.
    pub fn enabled(&self) -> bool {
        self.source != TokenSource::None
    }

    /// Re-reads the token file, if tokens come from one. A file that cannot be read or parsed
    /// leaves the tokens in force as they were (and the error says why).
    pub fn reload(&self) -> Result<(), String> {
        let TokenSource::File(path) = &self.source else { return Ok(()) };
        let tokens = Tokens::read(path)?;
        *self.tokens.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(tokens);
        Ok(())
    }

    /// The token this node presents to the other nodes of its cluster (the token file's `node`
    /// token, or the one token holding every role), if tokens are required.
    pub fn node_token(&self) -> Option<String> {
        self.tokens.read().unwrap_or_else(|p| p.into_inner()).node()
    }

    /// The roles of the request's bearer token (every role when no token is required), or 401
    /// with the `WWW-Authenticate: Bearer` challenge.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Roles, ApiError> {
        if !self.enabled() {
            return Ok(Roles::all());
        }
        let Some(given) = headers.get(AUTHORIZATION) else { return Err(ApiError::unauthorized(false)) };
        let given = given.as_bytes();
        // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
        let token = match given.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &given[7..],
            _ => return Err(ApiError::unauthorized(false)),
        };
        let tokens = Arc::clone(&self.tokens.read().unwrap_or_else(|p| p.into_inner()));
        tokens.roles_of(token).ok_or_else(|| ApiError::unauthorized(true))
    }
}

/// 403 unless `roles` holds `role`.
pub fn require(roles: Roles, role: Role) -> Result<(), ApiError> {
    if roles.holds(role) {
        Ok(())
    } else {
        Err(ApiError::forbidden(role.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn with(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn admits_only_the_right_bearer_token() {
        let auth = Auth::new(TokenSource::Single("s3cret".into())).unwrap();
        assert_eq!(auth.authenticate(&with("Bearer s3cret")), Ok(Roles::all()));
        assert!(auth.authenticate(&with("bearer s3cret")).is_ok());
        assert!(auth.authenticate(&with("Bearer s3cre")).is_err());
        assert!(auth.authenticate(&with("Bearer s3cret ")).is_err());
        assert!(auth.authenticate(&with("Basic s3cret")).is_err());
        assert!(auth.authenticate(&HeaderMap::new()).is_err());
        assert!(Auth::new(TokenSource::None).unwrap().authenticate(&HeaderMap::new()).is_ok());
        assert_eq!(format!("{:?}", auth), "Auth { enabled: true }");
    }

    #[test]
    fn a_token_file_gives_each_token_its_roles() {
        let tokens =
            Tokens::parse("# dashboards\nmetrics m1\n\nread r1\nwrite w1\nadmin,metrics a1\nread m1\n").unwrap();
        let roles = |t: &str| tokens.roles_of(t.as_bytes()).unwrap();
        assert!(roles("m1").holds(Role::Metrics) && roles("m1").holds(Role::Read) && !roles("m1").holds(Role::Write));
        assert!(roles("r1").holds(Role::Read) && !roles("r1").holds(Role::Write));
        assert!(roles("w1").holds(Role::Write) && roles("w1").holds(Role::Read), "write holds read");
        assert!(!roles("w1").holds(Role::Metrics) && !roles("w1").holds(Role::Admin));
        assert!(roles("a1").holds(Role::Admin) && roles("a1").holds(Role::Metrics) && !roles("a1").holds(Role::Read));
        assert_eq!(tokens.roles_of(b"nope"), None);
        assert_eq!(format!("{tokens:?}"), "Tokens { count: 4 }");
    }

    /// A node presents the file's `node` token to the others (the one token, when there is a
    /// single one holding every role); a file without one gives none, and no token is asked
    /// without auth.
    #[test]
    fn a_node_presents_the_node_token() {
        let file = Tokens::parse("admin a1\nnode n1\nnode n2\n").unwrap();
        assert_eq!(file.node().as_deref(), Some("n1"));
        assert!(!file.roles_of(b"a1").unwrap().holds(Role::Node), "admin is no node");
        assert_eq!(Tokens::parse("admin a1\n").unwrap().node(), None);
        let single = Auth::new(TokenSource::Single("s3cret".into())).unwrap();
        assert_eq!(single.node_token().as_deref(), Some("s3cret"));
        assert_eq!(Auth::new(TokenSource::None).unwrap().node_token(), None);
    }

    #[test]
    fn a_bad_token_file_is_refused_naming_the_line_not_the_token() {
        let err = Tokens::parse("read ok\nsuperuser s3cret\n").unwrap_err();
        assert!(err.contains("line 2") && err.contains("superuser") && !err.contains("s3cret"), "{err}");
        assert!(Tokens::parse("justatoken\n").unwrap_err().contains("line 1"));
        assert!(Tokens::parse("# nothing\n\n").unwrap_err().contains("no token"));
    }

    #[test]
    fn reload_swaps_the_tokens_and_keeps_them_when_the_file_is_bad() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "read old\n").unwrap();
        let auth = Auth::new(TokenSource::File(path.clone())).unwrap();
        assert!(auth.authenticate(&with("Bearer old")).is_ok());
        std::fs::write(&path, "read new\n").unwrap();
        auth.reload().unwrap();
        assert!(auth.authenticate(&with("Bearer old")).is_err());
        assert!(auth.authenticate(&with("Bearer new")).is_ok());
        std::fs::write(&path, "root new\n").unwrap();
        assert!(auth.reload().is_err());
        assert!(auth.authenticate(&with("Bearer new")).is_ok(), "a bad file keeps what was in force");
    }

    #[test]
    fn a_missing_role_is_403() {
        let roles = Role::Read.grants();
        assert!(require(roles, Role::Read).is_ok());
        let err = require(roles, Role::Write).unwrap_err();
        assert_eq!((err.status.as_u16(), err.code), (403, "forbidden"));
    }
}
