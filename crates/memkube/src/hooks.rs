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
    /// Verb, `write` (create, update, patch, delete, deletecollection) or `*`.
    pub verb: String,
    /// `plural` or `plural.group` (or `*`).
    pub resource: String,
    /// Only this object name.
    pub name: Option<String>,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this subresource (`status`, ...); None matches the main resource and all subresources.
    pub subresource: Option<String>,
    /// Only requests of this `Impersonate-User` ("" for clients that send none).
    pub user: Option<String>,
    /// Fail one matching request in this many on average (1: each one), as a flaky server
    /// would: which ones is drawn from a fixed-seed generator, so a run does not lock into a
    /// client's request pattern and the draws repeat from run to run. The requests that pass
    /// do not use up `times`.
    pub one_in: u64,
    /// The generator's state (xorshift64).
    draw: u64,
    /// What the server does with a failed request: refuse it, or carry it out and then answer
    /// with the error or not at all.
    pub mode: FaultMode,
    /// Matching requests to let through before the fault applies (the step to fail at).
    pub skip: usize,
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
            user: None,
            one_in: 1,
            draw: 0x9E37_79B9_7F4A_7C15,
            mode: FaultMode::Refuse,
            skip: 0,
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
    /// Limit to the requests of one client (its `Impersonate-User`, "" for none).
    pub fn user(mut self, u: &str) -> Self {
        self.user = Some(u.into());
        self
    }
    /// Fail one matching request in `n` on average (at least 1).
    pub fn one_in(mut self, n: u64) -> Self {
        self.one_in = n.max(1);
        self
    }

    /// Whether the requests to let through are used up (counting this one off if not).
    fn passes_skip(&mut self) -> bool {
        if self.skip == 0 {
            return true;
        }
        self.skip -= 1;
        false
    }

    /// Whether this matching request fails.
    fn fails_now(&mut self) -> bool {
        if self.one_in == 1 {
            return true;
        }
        self.draw ^= self.draw << 13;
        self.draw ^= self.draw >> 7;
        self.draw ^= self.draw << 17;
        self.draw.is_multiple_of(self.one_in)
    }
    /// Carry the request out and answer with the error all the same.
    pub fn after_applying(mut self) -> Self {
        self.mode = FaultMode::LoseAnswer;
        self
    }
    /// Carry the request out and never answer: the client waits until it dies, so a test can
    /// kill it right after a given write.
    pub fn hang_after_applying(mut self) -> Self {
        self.mode = FaultMode::Hang;
        self
    }
    /// Let the first `n` matching requests through.
    pub fn skip(mut self, n: usize) -> Self {
        self.skip = n;
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
        let write = matches!(
            r.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        );
        (self.verb == "*" || self.verb == r.verb || (self.verb == "write" && write))
            && (self.resource == "*" || self.resource == r.resource || self.resource == r.qualified())
            && self.name.as_ref().is_none_or(|n| *n == r.name)
            && self.namespace.as_ref().is_none_or(|n| *n == r.namespace)
            && self.subresource.as_ref().is_none_or(|s| *s == r.subresource)
            && self.user.as_ref().is_none_or(|u| *u == r.user)
    }
}

/// What a fault does with the request it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultMode {
    /// Answer with the error; nothing happens.
    Refuse,
    /// Carry the request out, then answer with the error: the client cannot tell whether its
    /// write happened, as when a connection drops before the answer.
    LoseAnswer,
    /// Carry the request out and never answer.
    Hang,
}

/// A fault that applies to a request: its error and what to do with the request.
#[derive(Debug)]
pub struct Injected {
    /// The error answered (unused when hanging).
    pub error: ApiError,
    /// What the server does.
    pub mode: FaultMode,
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
    pub fn on_request(&mut self, r: &RequestInfo) -> Option<Injected> {
        *self
            .counts
            .entry((r.user.clone(), r.verb.clone(), r.qualified(), r.subresource.clone()))
            .or_default() += 1;
        self.record_authorization(r);
        let i = self
            .faults
            .iter_mut()
            .position(|f| f.times > 0 && f.matches(r) && f.passes_skip() && f.fails_now())?;
        let f = &mut self.faults[i];
        f.times -= 1;
        let err = ApiError::new(f.code, &f.reason, f.message.clone());
        let mode = f.mode;
        if f.times == 0 {
            self.faults.remove(i);
        }
        Some(Injected { error: err, mode })
    }

    /// Add a fault.
    pub fn add_fault(&mut self, f: Fault) {
        self.faults.push(f);
    }

    /// Faults not used up yet.
    pub fn pending_faults(&self) -> usize {
        self.faults.len()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(verb: &str, user: &str) -> RequestInfo {
        RequestInfo {
            verb: verb.into(),
            resource: "secrets".into(),
            user: user.into(),
            ..RequestInfo::default()
        }
    }

    #[test]
    fn a_flaky_fault_fails_about_one_request_in_n_until_used_up() {
        let mut hooks = Hooks::default();
        hooks.add_fault(Fault::new("get", "secrets", 503).one_in(5).times(1500));
        let failed = (0..5000)
            .filter(|_| hooks.on_request(&request("get", "")).is_some())
            .count();
        assert!(
            (850..=1150).contains(&failed),
            "{failed} of 5000 failed, not about 1000"
        );
        let more = (0..10_000)
            .filter(|_| hooks.on_request(&request("get", "")).is_some())
            .count();
        assert_eq!(failed + more, 1500, "then the fault is used up");
        let other = hooks.on_request(&RequestInfo {
            resource: "configmaps".into(),
            ..request("get", "")
        });
        assert!(other.is_none(), "another resource is not affected");
    }

    #[test]
    fn a_fault_for_one_client_leaves_the_others_alone() {
        let mut hooks = Hooks::default();
        hooks.add_fault(Fault::new("*", "*", 429).user("manager").times(usize::MAX));
        assert!(hooks.on_request(&request("get", "sim")).is_none());
        assert!(hooks.on_request(&request("get", "")).is_none());
        let err = hooks.on_request(&request("list", "manager"));
        assert_eq!(err.map(|i| (i.error.code, i.mode)), Some((429, FaultMode::Refuse)));
    }

    #[test]
    fn a_fault_can_wait_for_the_nth_matching_request() {
        let mut hooks = Hooks::default();
        hooks.add_fault(Fault::new("create", "*", 500).skip(2).hang_after_applying());
        let seen: Vec<Option<FaultMode>> = (0..4)
            .map(|_| hooks.on_request(&request("create", "")).map(|i| i.mode))
            .collect();
        assert_eq!(seen, [None, None, Some(FaultMode::Hang), None]);
        assert_eq!(hooks.pending_faults(), 0);
        hooks.add_fault(Fault::new("write", "*", 500));
        assert!(hooks.on_request(&request("get", "")).is_none(), "a read is no write");
        assert!(hooks.on_request(&request("delete", "")).is_some());
    }
}
