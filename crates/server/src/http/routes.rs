//! The routes of the API (`docs/http-api.md`, "Routes"): which path is which route, which
//! methods each allows and which role each needs. Adding a route means naming it, its methods
//! and its role here.

use hyper::Method;

use super::{auth::Role, error::ApiError};

/// A route of the API, also the `route` label of the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `/kv/{key}`: GET, HEAD, PUT, DELETE.
    Kv,
    /// `/batch`: POST.
    Batch,
    /// `/keys`: GET, HEAD.
    Keys,
    /// `/export`: GET.
    Export,
    /// `/healthz`: GET, HEAD; no auth, no storage work: liveness.
    Healthz,
    /// `/readyz`: GET, HEAD; no auth: whether the storage is open and healthy.
    Readyz,
    /// `/admin/check`: GET; checks every partition of the running store.
    AdminCheck,
    /// `/stats`: GET, HEAD.
    Stats,
    /// `/metrics`: GET, HEAD.
    Metrics,
    /// `/admin/backup`: POST starts a backup, GET and HEAD answer its status; role "admin".
    AdminBackup,
    /// `/openapi.yaml`: GET, HEAD; no auth: the API's OpenAPI description (`docs/openapi.yaml`).
    OpenApi,
    /// `/admin/compact`: POST compacts every partition; role "admin".
    AdminCompact,
    /// `/cluster`: GET, HEAD; the cluster map this node follows; role "read".
    Cluster,
    /// `/admin/move`: POST moves a partition this node owns to another node; role "admin".
    AdminMove,
    /// `/admin/move/records`: GET streams a partition for its move; role "admin".
    AdminMoveRecords,
    /// `/admin/adopt`: POST takes a partition in from its owner; role "admin".
    AdminAdopt,
    /// `/admin/takeover`: POST restores a dead node's partition from its replica and takes it
    /// in, for a failover; role "admin".
    AdminTakeover,
    /// `/admin/replicate`: POST takes in a frame of an owner's writes for the copies this node
    /// keeps (or, at a failover, seals a dead owner or brings a copy up to date); GET answers
    /// what another copy lacks; role "node".
    AdminReplicate,
    /// Any other path: 404.
    Unknown,
}

/// Where keys start in a `/kv/{key}` path.
const KV_PREFIX: &str = "/kv/";

impl Route {
    /// Every route that serves a path ([`Route::Unknown`] aside): what the OpenAPI description
    /// must describe (the tests of `crate::handlers::openapi` check that it does).
    #[cfg(test)]
    pub const SERVED: [Route; 18] = [
        Route::Kv,
        Route::Batch,
        Route::Keys,
        Route::Export,
        Route::Healthz,
        Route::Readyz,
        Route::AdminCheck,
        Route::Stats,
        Route::Metrics,
        Route::AdminBackup,
        Route::AdminCompact,
        Route::OpenApi,
        Route::Cluster,
        Route::AdminMove,
        Route::AdminMoveRecords,
        Route::AdminAdopt,
        Route::AdminTakeover,
        Route::AdminReplicate,
    ];

    /// The route serving `path`.
    pub fn of(path: &str) -> Self {
        match path {
            "/healthz" => Route::Healthz,
            "/readyz" => Route::Readyz,
            "/batch" => Route::Batch,
            "/keys" => Route::Keys,
            "/export" => Route::Export,
            "/admin/check" => Route::AdminCheck,
            "/stats" => Route::Stats,
            "/metrics" => Route::Metrics,
            "/admin/backup" => Route::AdminBackup,
            "/openapi.yaml" => Route::OpenApi,
            "/admin/compact" => Route::AdminCompact,
            "/cluster" => Route::Cluster,
            "/admin/move" => Route::AdminMove,
            "/admin/move/records" => Route::AdminMoveRecords,
            "/admin/adopt" => Route::AdminAdopt,
            "/admin/takeover" => Route::AdminTakeover,
            "/admin/replicate" => Route::AdminReplicate,
            _ if path.starts_with(KV_PREFIX) => Route::Kv,
            _ => Route::Unknown,
        }
    }

    /// The route's name in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Kv => "/kv/{key}",
            Route::Batch => "/batch",
            Route::Keys => "/keys",
            Route::Export => "/export",
            Route::Healthz => "/healthz",
            Route::Readyz => "/readyz",
            Route::AdminCheck => "/admin/check",
            Route::Stats => "/stats",
            Route::Metrics => "/metrics",
            Route::AdminBackup => "/admin/backup",
            Route::OpenApi => "/openapi.yaml",
            Route::AdminCompact => "/admin/compact",
            Route::Cluster => "/cluster",
            Route::AdminMove => "/admin/move",
            Route::AdminMoveRecords => "/admin/move/records",
            Route::AdminAdopt => "/admin/adopt",
            Route::AdminTakeover => "/admin/takeover",
            Route::AdminReplicate => "/admin/replicate",
            Route::Unknown => "unknown",
        }
    }

    /// The role a token needs for `method` on this route; `None`: no token needed. Unknown
    /// routes need none here: any valid token learns they are unknown, no token learns
    /// nothing (authentication comes before routing).
    pub fn role(self, method: &Method) -> Option<Role> {
        match self {
            Route::Kv if matches!(*method, Method::GET | Method::HEAD) => Some(Role::Read),
            Route::Kv | Route::Batch => Some(Role::Write),
            // Every record of a partition: what reads of each key would give. The map: where
            // each key is read.
            Route::Keys | Route::Export | Route::Cluster => Some(Role::Read),
            Route::AdminCheck | Route::AdminBackup | Route::AdminCompact | Route::AdminMove => Some(Role::Admin),
            // A node's part of a move, a failover or replication: only another node asks.
            Route::AdminMoveRecords | Route::AdminAdopt | Route::AdminTakeover | Route::AdminReplicate => {
                Some(Role::Node)
            }
            Route::Stats | Route::Metrics => Some(Role::Metrics),
            Route::Healthz | Route::Readyz | Route::OpenApi | Route::Unknown => None,
        }
    }

    /// Whether the route answers without a token at all (probes, and the API's description).
    pub fn is_public(self) -> bool {
        matches!(self, Route::Healthz | Route::Readyz | Route::OpenApi)
    }

    /// Answers 405 (with `Allow`) unless the route serves `method`; 404 for unknown routes.
    pub fn allow(self, method: &Method, path: &str) -> Result<(), ApiError> {
        let (allowed, allow) = match self {
            Route::Kv => {
                (matches!(*method, Method::GET | Method::HEAD | Method::PUT | Method::DELETE), "GET, HEAD, PUT, DELETE")
            }
            Route::Batch | Route::AdminCompact | Route::AdminMove | Route::AdminAdopt | Route::AdminTakeover => {
                (*method == Method::POST, "POST")
            }
            Route::Export | Route::AdminCheck | Route::AdminMoveRecords => (*method == Method::GET, "GET"),
            Route::AdminReplicate => (matches!(*method, Method::GET | Method::POST), "GET, POST"),
            Route::AdminBackup => (matches!(*method, Method::GET | Method::HEAD | Method::POST), "GET, HEAD, POST"),
            Route::Healthz
            | Route::Readyz
            | Route::Stats
            | Route::Metrics
            | Route::Keys
            | Route::OpenApi
            | Route::Cluster => (matches!(*method, Method::GET | Method::HEAD), "GET, HEAD"),
            Route::Unknown => return Err(ApiError::unknown_route(path)),
        };
        if allowed {
            Ok(())
        } else {
            Err(ApiError::method_not_allowed(method, allow))
        }
    }
}

/// The hex key of a `/kv/{key}` path.
pub fn kv_key(path: &str) -> &str {
    path.strip_prefix(KV_PREFIX).unwrap_or_default()
}

/// A method's name in metrics: the methods the API uses, and `other` for the rest (so a client
/// cannot make up label values).
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::POST => "POST",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_routes_and_methods_are_checked() {
        assert_eq!(Route::of("/kv/00ff"), Route::Kv);
        assert_eq!(Route::of("/kv/"), Route::Kv);
        assert_eq!(Route::of("/kv"), Route::Unknown);
        assert_eq!(Route::of("/healthz/"), Route::Unknown);
        assert_eq!(kv_key("/kv/00ff"), "00ff");
        assert!(Route::Kv.allow(&Method::DELETE, "/kv/00").is_ok());
        let err = Route::Kv.allow(&Method::POST, "/kv/00").unwrap_err();
        assert_eq!(err.status, 405);
        assert_eq!(err.headers[0].1, "GET, HEAD, PUT, DELETE");
        assert_eq!(Route::Unknown.allow(&Method::GET, "/nope").unwrap_err().status, 404);
    }

    #[test]
    fn each_route_names_its_role() {
        assert_eq!(Route::Kv.role(&Method::GET), Some(Role::Read));
        assert_eq!(Route::Kv.role(&Method::HEAD), Some(Role::Read));
        assert_eq!(Route::Kv.role(&Method::PUT), Some(Role::Write));
        assert_eq!(Route::Kv.role(&Method::DELETE), Some(Role::Write));
        assert_eq!(Route::Batch.role(&Method::POST), Some(Role::Write));
        assert_eq!(Route::Keys.role(&Method::GET), Some(Role::Read));
        assert_eq!(Route::Export.role(&Method::GET), Some(Role::Read));
        assert_eq!(Route::AdminCheck.role(&Method::GET), Some(Role::Admin));
        assert_eq!(Route::AdminCompact.role(&Method::POST), Some(Role::Admin));
        assert_eq!(Route::Stats.role(&Method::GET), Some(Role::Metrics));
        assert_eq!(Route::Metrics.role(&Method::GET), Some(Role::Metrics));
        assert_eq!(Route::Healthz.role(&Method::GET), None);
        assert_eq!(Route::Readyz.role(&Method::GET), None);
        assert_eq!(Route::OpenApi.role(&Method::GET), None);
        assert_eq!(Route::Cluster.role(&Method::GET), Some(Role::Read));
        assert_eq!(Route::AdminMove.role(&Method::POST), Some(Role::Admin));
        assert_eq!(Route::AdminMoveRecords.role(&Method::GET), Some(Role::Node));
        assert_eq!(Route::AdminAdopt.role(&Method::POST), Some(Role::Node));
        assert_eq!(Route::AdminTakeover.role(&Method::POST), Some(Role::Node));
        assert_eq!(Route::AdminReplicate.role(&Method::POST), Some(Role::Node));
        assert!(Route::Healthz.is_public() && Route::Readyz.is_public() && !Route::Unknown.is_public());
        assert!(Route::OpenApi.is_public());
    }

    #[test]
    fn every_served_route_is_listed_and_its_name_is_its_path() {
        for route in Route::SERVED {
            assert_eq!(Route::of(route.as_str()), route, "{route:?}");
        }
        // A new route fails to compile here until it is placed: listed in SERVED, or Unknown.
        let listed = |route: Route| match route {
            Route::Kv
            | Route::Batch
            | Route::Keys
            | Route::Export
            | Route::Healthz
            | Route::Readyz
            | Route::AdminCheck
            | Route::Stats
            | Route::Metrics
            | Route::AdminBackup
            | Route::AdminCompact
            | Route::OpenApi
            | Route::Cluster
            | Route::AdminMove
            | Route::AdminMoveRecords
            | Route::AdminAdopt
            | Route::AdminTakeover
            | Route::AdminReplicate => Route::SERVED.contains(&route),
            Route::Unknown => !Route::SERVED.contains(&route),
        };
        assert!(Route::SERVED.into_iter().chain([Route::Unknown]).all(listed));
    }
}
