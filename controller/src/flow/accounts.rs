//! Clients acting as a flow's ServiceAccount, by impersonation (docs/security.md): a bound flow
//! does everything to its kind's objects this way, and so does a flow's API step the controller
//! runs itself. Shared by both reconcilers, so it lives with neither.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::core::GroupVersionKind;
use kube::discovery::{pinned_kind, ApiResource, Scope};
use kube::Client;
use pseudoflow_crd::bind::Bind;

/// The controller's client configuration and what was made from it: clients acting as
/// ServiceAccounts, and the kinds discovery showed each of them.
#[derive(Default)]
pub struct Accounts {
    /// The controller's own configuration; impersonating clients are derived from it. Without
    /// it (a controller started from a bare client) bound flows fail, saying so.
    config: Option<kube::Config>,
    /// Clients acting as `namespace/serviceaccount`, made once.
    clients: Mutex<HashMap<String, Client>>,
    /// The resource of each kind and whether it is namespaced, per ServiceAccount.
    kinds: Mutex<HashMap<String, (ApiResource, bool)>>,
}

impl Accounts {
    /// Accounts acting from `config` (the controller's own client configuration).
    pub fn with_config(config: kube::Config) -> Self {
        Accounts {
            config: Some(config),
            ..Default::default()
        }
    }
}

/// The username Kubernetes gives ServiceAccount `sa` of `ns`.
pub fn service_account_user(ns: &str, sa: &str) -> String {
    format!("system:serviceaccount:{ns}:{sa}")
}

impl Accounts {
    /// A client acting as ServiceAccount `sa` of `ns` (made once, then shared).
    pub fn client_as(&self, ns: &str, sa: &str) -> Result<Client, String> {
        let key = format!("{ns}/{sa}");
        let mut clients = self.clients.lock().expect("not poisoned");
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let Some(config) = &self.config else {
            return Err(
                "this controller was started without a client configuration to act \
                        as the flow's ServiceAccount; bound flows cannot run"
                    .into(),
            );
        };
        let mut config = config.clone();
        config.auth_info.impersonate = Some(service_account_user(ns, sa));
        config.auth_info.impersonate_groups = None;
        let client = Client::try_from(config).map_err(|e| format!("client for {key}: {e}"))?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

impl Accounts {
    /// The resource of `bind`'s kind and whether it is namespaced, as discovery tells the flow's
    /// ServiceAccount (asked once per account and kind, then remembered).
    pub async fn kind(
        &self,
        client: &Client,
        ns: &str,
        sa: &str,
        bind: &Bind,
    ) -> Result<(ApiResource, bool), String> {
        self.kind_of(client, ns, sa, &bind.api_version, &bind.kind)
            .await
    }

    /// [`Accounts::kind`] for any kind (a bound kind, or a related one).
    pub async fn kind_of(
        &self,
        client: &Client,
        ns: &str,
        sa: &str,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), String> {
        let key = format!("{ns}/{sa} {api_version}/{kind}");
        if let Some(k) = self.kinds.lock().expect("not poisoned").get(&key) {
            return Ok(k.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = pinned_kind(client, &gvk)
            .await
            .map_err(|e| format!("kind {kind} of {api_version} is not served: {e}"))?;
        let found = (ar, caps.scope == Scope::Namespaced);
        let mut kinds = self.kinds.lock().expect("not poisoned");
        kinds.insert(key, found.clone());
        Ok(found)
    }
}
