//! The `loadstar.v1.Scheduler` gRPC service: lets another scheduler delegate placement and
//! binding of a pod to Loadstar. Without a Kubernetes connection it says so.
use std::sync::Arc;

use loadstar_common::pb;
use tonic::{Request, Response, Status};

use crate::service::{Binder, NO_KUBERNETES};

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
        match &req.pod {
            Some(p) if !p.name.is_empty() => {}
            _ => return Err(Status::invalid_argument("pod.name is required")),
        }
        binder.bind(req).await.map(Response::new)
    }
}
