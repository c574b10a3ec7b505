//! One-byte summaries of each node's digest row that a filter or score reads (flags, a
//! state), memoised per digest table so a pass over thousands of nodes reads a byte per node
//! instead of the row's cache line.
use loadstar_framework::CycleContext;
use loadstar_framework::snapshot::{ClusterSnapshot, Memo, NodeDigest, NodeView};

/// A one-byte summary of a node's row that a plugin's verdict reads (flags, a state), kept
/// for every node of a digest table as [`RowCodes`].
pub trait RowCode: Send + Sync + std::fmt::Debug + 'static {
    /// The code of the node whose row is `d`.
    fn code(d: &NodeDigest) -> u8;
}

/// [`RowCode::code`] of every node, in `nodes` order: built once per digest table
/// ([`CycleContext::memo`]) and patched with the row, so a pass reads one byte per node
/// instead of the row's line.
#[derive(Debug)]
pub struct RowCodes<C> {
    codes: Vec<u8>,
    code: std::marker::PhantomData<fn() -> C>,
}

impl<C: RowCode> Memo for RowCodes<C> {
    /// The scheduler assumed a pod on one node: its code is computed again from its row.
    fn patch(
        &mut self,
        index: usize,
        row: &NodeDigest,
        _node: &NodeView,
        snapshot: &ClusterSnapshot,
    ) -> bool {
        if self.codes.len() != snapshot.nodes.len() {
            return false;
        }
        match self.codes.get_mut(index) {
            Some(c) => {
                *c = C::code(row);
                true
            }
            None => false,
        }
    }
}

impl<C: RowCode> RowCodes<C> {
    /// The cycle's codes, when its table has every row current.
    pub fn of(ctx: &CycleContext<'_>) -> Option<std::sync::Arc<RowCodes<C>>> {
        ctx.memo(0, || RowCodes {
            codes: ctx
                .snapshot
                .nodes
                .iter()
                .map(|n| C::code(&ctx.digest(n)))
                .collect(),
            code: std::marker::PhantomData,
        })
    }
}

/// The code of the snapshot's node `index`: from `codes` when given, else from its row.
#[inline(always)]
pub fn code_at<C: RowCode>(
    codes: Option<&RowCodes<C>>,
    ctx: &CycleContext<'_>,
    index: usize,
) -> u8 {
    match codes.and_then(|c| c.codes.get(index)) {
        Some(&c) => c,
        None => C::code(&ctx.digest_at(index)),
    }
}
