//! The `loadstar.v1.Scheduler` gRPC service: lets another scheduler delegate placement and
//! binding of a pod to Loadstar. Without a Kubernetes connection it says so.
use std::sync::Arc;

use loadstar_proto::pb;
use tonic::{Request, Response, Status};

use loadstar_store::cluster::{BindRequest, Binder};

use crate::NO_KUBERNETES;
use crate::scorer::to_response;
use crate::status;

/// The Scheduler service.
#[derive(Debug, Clone)]
pub struct SchedulerService {
    binder: Option<Arc<dyn Binder>>,
}

impl SchedulerService {
    /// A service that binds through `binder` (None: every call answers FAILED_PRECONDITION).
    pub fn new(binder: Option<Arc<dyn Binder>>) -> Self {
        SchedulerService { binder }
    }
}

#[tonic::async_trait]
impl pb::scheduler_server::Scheduler for SchedulerService {
    async fn bind(
        &self,
        request: Request<pb::BindRequest>,
    ) -> Result<Response<pb::BindResponse>, Status> {
        let binder = self
            .binder
            .as_ref()
            .ok_or_else(|| Status::failed_precondition(NO_KUBERNETES))?;
        let req = request.into_inner();
        let pod = match req.pod {
            Some(p) if !p.name.is_empty() => p,
            _ => return Err(Status::invalid_argument("pod.name is required")),
        };
        let outcome = binder
            .bind(BindRequest {
                namespace: pod.namespace,
                name: pod.name,
                profile: req.profile,
                node_name: req.node_name,
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
