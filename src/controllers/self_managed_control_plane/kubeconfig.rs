//! The kubeconfig Cluster API core reaches the cluster with: which server it names, rendering it
//! (deterministic, so the same inputs give the same bytes and an edit shows as a difference), and
//! reading the token back out of a stored one. Pure.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::api::common::ApiEndpoint;

/// Everything in the kubeconfig except the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// Cluster name: the kubeconfig's cluster and context name.
    pub cluster: String,
    /// API server URL.
    pub server: String,
    /// CA bundle (PEM) to verify the server with; `None` leaves it to the system roots.
    pub ca_pem: Option<String>,
    /// The kubeconfig user's name: the ServiceAccount, `namespace/name`.
    pub user: String,
}

/// The API server URL: `spec.server` (or the manager's `--workload-api-server`) when set, else
/// `https://<host>:<port>` of the Cluster's endpoint, else of the LibvirtCluster's. `None` when
/// none is known.
#[must_use]
pub fn server(spec_server: Option<&str>, cluster: Option<&ApiEndpoint>, infra: Option<&ApiEndpoint>) -> Option<String> {
    if let Some(server) = spec_server.filter(|s| !s.is_empty()) {
        return Some(server.to_owned());
    }
    let endpoint = cluster.or(infra).filter(|e| !e.host.is_empty() && e.port > 0)?;
    let host = if endpoint.host.contains(':') && !endpoint.host.starts_with('[') {
        format!("[{}]", endpoint.host)
    } else {
        endpoint.host.clone()
    };
    Some(format!("https://{host}:{}", endpoint.port))
}

#[derive(Debug, Deserialize, Serialize)]
struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    clusters: Vec<Named<ClusterEntry>>,
    contexts: Vec<Named<ContextEntry>>,
    #[serde(rename = "current-context")]
    current_context: String,
    users: Vec<Named<UserEntry>>,
}

#[derive(Debug, Deserialize, Serialize)]
struct Named<T> {
    name: String,
    #[serde(flatten)]
    entry: T,
}

#[derive(Debug, Deserialize, Serialize)]
struct ClusterEntry {
    cluster: ClusterFields,
}

#[derive(Debug, Deserialize, Serialize)]
struct ClusterFields {
    server: String,
    #[serde(
        rename = "certificate-authority-data",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    certificate_authority_data: Option<String>,
}

#[derive(Debug, Deserialize, Serialize)]
struct ContextEntry {
    context: ContextFields,
}

#[derive(Debug, Deserialize, Serialize)]
struct ContextFields {
    cluster: String,
    user: String,
}

#[derive(Debug, Deserialize, Serialize)]
struct UserEntry {
    user: UserFields,
}

#[derive(Deserialize, Serialize)]
struct UserFields {
    #[serde(default)]
    token: String,
}

impl std::fmt::Debug for UserFields {
    /// Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserFields").finish_non_exhaustive()
    }
}

/// The kubeconfig YAML for `access` authenticating with `token`.
#[must_use]
pub fn render(access: &Access, token: &str) -> String {
    let doc = Kubeconfig {
        api_version: "v1".to_owned(),
        kind: "Config".to_owned(),
        clusters: vec![Named {
            name: access.cluster.clone(),
            entry: ClusterEntry {
                cluster: ClusterFields {
                    server: access.server.clone(),
                    certificate_authority_data: access
                        .ca_pem
                        .as_ref()
                        .map(|pem| base64::engine::general_purpose::STANDARD.encode(pem)),
                },
            },
        }],
        contexts: vec![Named {
            name: access.cluster.clone(),
            entry: ContextEntry {
                context: ContextFields {
                    cluster: access.cluster.clone(),
                    user: access.user.clone(),
                },
            },
        }],
        current_context: access.cluster.clone(),
        users: vec![Named {
            name: access.user.clone(),
            entry: UserEntry {
                user: UserFields {
                    token: token.to_owned(),
                },
            },
        }],
    };
    // Plain strings, vectors and maps: serialising cannot fail.
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// The token of a kubeconfig this module rendered; `None` when `value` is not one (edited,
/// truncated, someone else's) or carries no token.
#[must_use]
pub fn token(value: &[u8]) -> Option<String> {
    let doc: Kubeconfig = serde_yaml::from_slice(value).ok()?;
    let token = doc.users.into_iter().next()?.entry.user.token;
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The seed's cluster as the workload ServiceAccount reaches it.
    pub(in crate::controllers::self_managed_control_plane) fn access() -> Access {
        Access {
            cluster: "spot".into(),
            server: "https://api.spot.labdroid.net:6443".into(),
            ca_pem: Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into()),
            user: "caplv-system/caplv-workload-access".into(),
        }
    }

    #[test]
    fn the_server_comes_from_the_spec_then_the_cluster_then_the_libvirt_cluster() {
        let endpoint = |host: &str, port| ApiEndpoint {
            host: host.into(),
            port,
        };
        let cluster = endpoint("api.spot.labdroid.net", 6443);
        let infra = endpoint("api-int.spot.labdroid.net", 6443);
        assert_eq!(
            server(Some("https://kubernetes.default.svc"), Some(&cluster), Some(&infra)).as_deref(),
            Some("https://kubernetes.default.svc")
        );
        assert_eq!(
            server(None, Some(&cluster), Some(&infra)).as_deref(),
            Some("https://api.spot.labdroid.net:6443")
        );
        assert_eq!(
            server(Some(""), None, Some(&infra)).as_deref(),
            Some("https://api-int.spot.labdroid.net:6443")
        );
        assert_eq!(
            server(None, Some(&endpoint("fd00::1", 6443)), None).as_deref(),
            Some("https://[fd00::1]:6443"),
            "IPv6 hosts are bracketed"
        );
        assert_eq!(server(None, Some(&endpoint("", 6443)), None), None);
        assert_eq!(server(None, None, None), None);
    }

    #[test]
    fn renders_a_kubeconfig_clients_read() {
        let yaml = render(&access(), "tok-123");
        let doc: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(doc["current-context"], "spot");
        assert_eq!(doc["clusters"][0]["name"], "spot");
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://api.spot.labdroid.net:6443"
        );
        let ca = doc["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap();
        let ca = base64::engine::general_purpose::STANDARD.decode(ca).unwrap();
        assert!(ca.starts_with(b"-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            doc["contexts"][0]["context"]["user"],
            "caplv-system/caplv-workload-access"
        );
        assert_eq!(doc["users"][0]["name"], "caplv-system/caplv-workload-access");
        assert_eq!(doc["users"][0]["user"]["token"], "tok-123");
        assert_eq!(render(&access(), "tok-123"), yaml, "deterministic");
    }

    #[test]
    fn without_a_ca_the_field_is_left_out() {
        let yaml = render(
            &Access {
                ca_pem: None,
                ..access()
            },
            "t",
        );
        assert!(!yaml.contains("certificate-authority"), "{yaml}");
    }

    #[test]
    fn the_token_reads_back_only_from_a_kubeconfig() {
        assert_eq!(
            token(render(&access(), "tok-123").as_bytes()).as_deref(),
            Some("tok-123")
        );
        assert_eq!(token(render(&access(), "").as_bytes()), None);
        assert_eq!(token(b"not: [a kubeconfig"), None);
        assert_eq!(token(b"apiVersion: v1\nkind: Config\n"), None);
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let fields = UserFields {
            token: "secret-token".into(),
        };
        assert!(!format!("{fields:?}").contains("secret-token"));
    }
}
