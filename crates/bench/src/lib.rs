//! The load generator and report (issue 5): not built yet; this crate only reserves its place in the workspace.
