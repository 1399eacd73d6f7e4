//! PodDisruptionBudgets from a watch, for preemption: victims whose eviction a budget does
//! not allow are spared where another choice exists.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;

use crate::watch::{self, Index, Readiness};

/// Every PodDisruptionBudget, by `ns/name`.
#[derive(Default)]
pub struct DisruptionBudgets {
    budgets: RwLock<HashMap<String, Arc<PodDisruptionBudget>>>,
}

fn key(pdb: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        pdb.metadata.namespace.as_deref().unwrap_or_default(),
        pdb.metadata.name.as_deref().unwrap_or_default()
    )
}

impl DisruptionBudgets {
    /// Every budget, ordered by namespace and name.
    pub fn all(&self) -> Vec<Arc<PodDisruptionBudget>> {
        let budgets = self.budgets.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<(&String, &Arc<PodDisruptionBudget>)> = budgets.iter().collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all.into_iter().map(|(_, b)| b.clone()).collect()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<PodDisruptionBudget>>> {
        self.budgets.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Index<PodDisruptionBudget> for DisruptionBudgets {
    fn apply(&self, pdb: PodDisruptionBudget) {
        self.write().insert(key(&pdb), Arc::new(pdb));
    }

    fn delete(&self, pdb: PodDisruptionBudget) {
        self.write().remove(&key(&pdb));
    }

    fn reset(&self, pdbs: Vec<PodDisruptionBudget>) {
        *self.write() = pdbs.into_iter().map(|p| (key(&p), Arc::new(p))).collect();
    }
}

/// The PodDisruptionBudget watch, registered in `readiness` now.
pub fn run_watch(
    budgets: Arc<DisruptionBudgets>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    let feed = readiness.register_for(
        "poddisruptionbudgets",
        crate::watch::Need::Plugins(crate::scheduler::framework::needs::PREEMPTION_PLUGINS),
    );
    async move {
        watch::run(
            Api::<PodDisruptionBudget>::all(client),
            "poddisruptionbudgets",
            Some(feed),
            budgets.as_ref(),
        )
        .await;
    }
}
