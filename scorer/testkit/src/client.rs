//! Reading a scorer as tests and benchmarks do: every node it knows, following `ListNodes`'
//! pages (500 nodes by default, at most 5 000 each).
use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;

/// Every node the scorer behind `c` knows, page by page.
pub async fn all_nodes(
    mut c: ScorerClient<tonic::transport::Channel>,
) -> Result<Vec<pb::NodeStatus>, tonic::Status> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = c
            .list_nodes(pb::ListNodesRequest {
                page_size: 5000,
                page_token,
            })
            .await?
            .into_inner();
        out.extend(page.nodes);
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        page_token = page.next_page_token;
    }
}
