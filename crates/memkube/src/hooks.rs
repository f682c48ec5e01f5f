//! Test hooks: fault injection, added latency and request counting.

use crate::status::ApiError;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a request is about (verbs: get, list, watch, create, update, patch, delete, deletecollection).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Verb.
    pub verb: String,
    /// API group ("" for core).
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Object name, if any.
    pub name: String,
    /// Namespace, if any.
    pub namespace: String,
    /// Subresource, if any.
    pub subresource: String,
    /// The `Impersonate-User` the client sent ("" when none): lets tests see which component
    /// of a process made which requests.
    pub user: String,
}

impl RequestInfo {
    /// `plural.group` or `plural`.
    pub fn qualified(&self) -> String {
        crate::status::qualified(&self.resource, &self.group)
    }
}

/// Fail the next `times` requests matching verb + resource (+ name/namespace/subresource).
#[derive(Debug, Clone)]
pub struct Fault {
    /// Verb or `*`.
    pub verb: String,
    /// `plural` or `plural.group` (or `*`).
    pub resource: String,
    /// Only this object name.
    pub name: Option<String>,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this subresource (`status`, ...); None matches the main resource and all subresources.
    pub subresource: Option<String>,
    /// HTTP code to answer.
    pub code: u16,
    /// Status reason.
    pub reason: String,
    /// Status message.
    pub message: String,
    /// Remaining failures.
    pub times: usize,
}

impl Fault {
    /// A fault failing once with `code` (reason InternalError unless set).
    pub fn new(verb: &str, resource: &str, code: u16) -> Self {
        Fault {
            verb: verb.into(),
            resource: resource.into(),
            name: None,
            namespace: None,
            subresource: None,
            code,
            reason: if code == 500 {
                "InternalError".into()
            } else {
                "InjectedFault".into()
            },
            message: "injected fault".into(),
            times: 1,
        }
    }
    /// Limit to an object name.
    pub fn name(mut self, n: &str) -> Self {
        self.name = Some(n.into());
        self
    }
    /// Limit to a namespace.
    pub fn namespace(mut self, n: &str) -> Self {
        self.namespace = Some(n.into());
        self
    }
    /// Limit to a subresource.
    pub fn subresource(mut self, s: &str) -> Self {
        self.subresource = Some(s.into());
        self
    }
    /// Status reason.
    pub fn reason(mut self, r: &str) -> Self {
        self.reason = r.into();
        self
    }
    /// Status message.
    pub fn message(mut self, m: &str) -> Self {
        self.message = m.into();
        self
    }
    /// Number of requests to fail.
    pub fn times(mut self, n: usize) -> Self {
        self.times = n;
        self
    }

    fn matches(&self, r: &RequestInfo) -> bool {
        (self.verb == "*" || self.verb == r.verb)
            && (self.resource == "*" || self.resource == r.resource || self.resource == r.qualified())
            && self.name.as_ref().is_none_or(|n| *n == r.name)
            && self.namespace.as_ref().is_none_or(|n| *n == r.namespace)
            && self.subresource.as_ref().is_none_or(|s| *s == r.subresource)
    }
}

/// Mutable hook state (behind its own lock).
#[derive(Debug, Default)]
pub struct Hooks {
    faults: Vec<Fault>,
    /// Latency added before each request.
    pub latency: Option<Duration>,
    /// Requests per (user, verb, `plural[.group]`, subresource).
    counts: BTreeMap<(String, String, String, String), u64>,
    by_user: BTreeMap<String, std::collections::BTreeSet<(String, String, String, String)>>,
}

impl Hooks {
    /// Remember that `r.user` needed authorization for `r` without counting a request: one
    /// request can need two verbs (an apply that creates needs `create` as well as `patch`).
    pub fn record_authorization(&mut self, r: &RequestInfo) {
        if !r.user.is_empty() {
            self.by_user.entry(r.user.clone()).or_default().insert((
                r.verb.clone(),
                r.qualified(),
                r.subresource.clone(),
                r.name.clone(),
            ));
        }
    }

    /// Count the request and consume a matching fault, if any.
    pub fn on_request(&mut self, r: &RequestInfo) -> Option<ApiError> {
        *self
            .counts
            .entry((r.user.clone(), r.verb.clone(), r.qualified(), r.subresource.clone()))
            .or_default() += 1;
        self.record_authorization(r);
        let i = self.faults.iter().position(|f| f.times > 0 && f.matches(r))?;
        let f = &mut self.faults[i];
        f.times -= 1;
        let err = ApiError::new(f.code, &f.reason, f.message.clone());
        if f.times == 0 {
            self.faults.remove(i);
        }
        Some(err)
    }

    /// Add a fault.
    pub fn add_fault(&mut self, f: Fault) {
        self.faults.push(f);
    }

    /// Remove all faults.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Requests seen for (verb, `plural[.group]`, subresource or "").
    pub fn count(&self, verb: &str, resource: &str, sub: &str) -> u64 {
        self.counts
            .iter()
            .filter(|((_, v, r, s), _)| v == verb && r == resource && s == sub)
            .map(|(_, n)| n)
            .sum()
    }

    /// All counts, keyed by (verb, resource, subresource), whoever made the requests.
    pub fn counts(&self) -> BTreeMap<(String, String, String), u64> {
        let mut all = BTreeMap::new();
        for ((_, verb, resource, sub), n) in &self.counts {
            *all.entry((verb.clone(), resource.clone(), sub.clone())).or_default() += n;
        }
        all
    }

    /// The counts of the requests `user` made (`""`: clients that sent no `Impersonate-User`).
    pub fn counts_of(&self, user: &str) -> BTreeMap<(String, String, String), u64> {
        self.counts
            .iter()
            .filter(|((u, ..), _)| u == user)
            .map(|((_, verb, resource, sub), n)| ((verb.clone(), resource.clone(), sub.clone()), *n))
            .collect()
    }

    /// The distinct (verb, `plural[.group]`, subresource, object name) requests `user` made
    /// (subresource and name "" when none).
    pub fn requests_by(&self, user: &str) -> std::collections::BTreeSet<(String, String, String, String)> {
        self.by_user.get(user).cloned().unwrap_or_default()
    }

    /// Forget all counts.
    pub fn reset_counts(&mut self) {
        self.counts.clear();
        self.by_user.clear();
    }
}
