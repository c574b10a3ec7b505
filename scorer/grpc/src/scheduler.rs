//! The `loadstar.v1.Scheduler` gRPC service: lets another scheduler delegate placement and
//! binding of a pod to Loadstar. Without a Kubernetes connection it says so. With
//! authentication on, the caller must itself be allowed to `create pods/binding` on the pod
//! (the scorer never binds for a caller what the caller could not bind), and pods of other
//! schedulers are refused unless the scorer is configured to take them.
use std::sync::Arc;

use loadstar_proto::pb;
use tonic::{Request, Response, Status};

use loadstar_store::cluster::{BindRequest, Binder};

use crate::NO_KUBERNETES;
use crate::gate::Gate;
use crate::scorer::to_response;
use crate::status;

/// The Scheduler service.
#[derive(Debug, Clone)]
pub struct SchedulerService {
    binder: Option<Arc<dyn Binder>>,
    gate: Gate,
    other_schedulers: bool,
}

impl SchedulerService {
    /// A service that binds through `binder` (None: every call answers FAILED_PRECONDITION),
    /// with no caller checks and only pods of the scorer's own profiles.
    pub fn new(binder: Option<Arc<dyn Binder>>) -> Self {
        SchedulerService {
            binder,
            gate: Gate::open(),
            other_schedulers: false,
        }
    }

    /// Checks callers at `gate`.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = gate;
        self
    }

    /// Also binds pods whose `schedulerName` is not one of the scorer's profiles.
    pub fn with_other_schedulers(mut self, allow: bool) -> Self {
        self.other_schedulers = allow;
        self
    }
}

#[tonic::async_trait]
impl pb::scheduler_server::Scheduler for SchedulerService {
    async fn bind(
        &self,
        request: Request<pb::BindRequest>,
    ) -> Result<Response<pb::BindResponse>, Status> {
        let pod = match &request.get_ref().pod {
            Some(p) if !p.name.is_empty() => p.clone(),
            _ => return Err(Status::invalid_argument("pod.name is required")),
        };
        let namespace = if pod.namespace.is_empty() {
            "default"
        } else {
            pod.namespace.as_str()
        };
        self.gate.bind(&request, namespace, &pod.name).await?;
        let binder = self
            .binder
            .as_ref()
            .ok_or_else(|| Status::failed_precondition(NO_KUBERNETES))?;
        let req = request.into_inner();
        let outcome = binder
            .bind(BindRequest {
                namespace: pod.namespace,
                name: pod.name,
                profile: req.profile,
                node_name: req.node_name,
                other_schedulers: self.other_schedulers,
            })
            .await
            .map_err(status::from_cluster)?;
        Ok(Response::new(pb::BindResponse {
            node_name: outcome.node_name,
            decision: Some(to_response(
                &outcome.profile,
                &outcome.snapshot,
                &outcome.evaluation,
            )),
        }))
    }
}
