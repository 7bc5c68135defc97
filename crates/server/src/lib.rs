//! The HTTP server (issue 3): not built yet; this crate only reserves its place in the workspace.
